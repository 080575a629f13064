"""Environments: where a source's tasks come from and where its rollouts run.

:class:`EnvSource` is what the orchestrator and ``prl eval`` use; ``prl env-server`` is
:func:`prl.envs.server.main`. Rollouts never raise (see :mod:`prl.envs.guard`); a dead env
server is reported by :meth:`EnvSource.check_alive` as :class:`EnvServerDied`.
"""

from prl.envs.guard import failed_trace, guarded
from prl.envs.source import EnvServerDied, EnvSource, build_taskset, select_tasks

__all__ = ["EnvServerDied", "EnvSource", "build_taskset", "failed_trace", "guarded", "select_tasks"]
