"""The process plan of ``prl rl``: which children to start, with which argv, env and logs.

Every child re-parses one resolved JSON config written by the run-directory code::

    inference     python -m prl inference    @ <attempt>/resolved/inference.json
    orchestrator  python -m prl orchestrator @ <attempt>/resolved/orchestrator.json
    trainer       whatever the trainer plugin's ``rl_processes`` returns: by default
                  python -m prl trainer @ <attempt>/resolved/trainer.json (the torch trainer
                  starts torchrun itself when trainer.num_workers > 1)

Env servers are not in the plan: :class:`prl.envs.EnvSource` (inside the orchestrator)
spawns ``prl env-server`` for the sources that need one and supervises it.

The inference child is a *service* (``ProcessSpec.service``): it writes its base URL to its
``ready_file`` once serving, and with a fixed port ``ProcessSpec.health_url`` says where the
launcher polls ``/health``. Launchers start services first and the rest once services are
ready; the run ends when every non-service child has exited. Where each role runs (GPUs,
nodes) is the launcher's business.

:func:`prepare_scratch` clears ``batches/`` and ``broadcasts/`` at launch: all of it for a
fresh run; on resume from step N, batches after N and broadcasts from N on (the trainer
re-broadcasts version N at start, and markers of an earlier attempt would fake its
handshake).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from prl import layout
from prl.contracts.launcher import ProcessSpec
from prl.hub import READ_CACHE_ENV
from prl.plugins import TRAINERS, get_registry

if TYPE_CHECKING:
    from prl.config.components import InferenceConfig
    from prl.config.roots import RLConfig


def _cmd(entry: str, config_file: Path) -> list[str]:
    return [sys.executable, "-m", "prl", entry, "@", str(config_file)]


def resume_step(config, run_dir: Path) -> int | None:
    """Step this launch resumes from in ``run_dir`` (None for a fresh run or a fork)."""
    if config.resume is None:
        return None
    root = layout.checkpoint_root(config.trainer.ckpt, run_dir)
    return layout.resume_step(config.resume, root, layout.COMPONENTS["rl"])


def prepare_scratch(run_dir: Path, step: int | None) -> None:
    """Clear ``batches/`` and ``broadcasts/`` for a launch (see the module docstring)."""
    layout.clear_scratch(run_dir, step)


def build_processes(
    config: RLConfig, run_dir: Path, attempt_config_dir: Path, attempt_log_dir: Path, clear_scratch: bool = True
) -> list[ProcessSpec]:
    """The children of one ``prl rl`` attempt, services first; clears scratch directories
    (not for a dry run, which only renders the plan)."""
    run_dir, resolved, logs = Path(run_dir), Path(attempt_config_dir) / "resolved", Path(attempt_log_dir)
    if clear_scratch:
        prepare_scratch(run_dir, resume_step(config, run_dir))
    common = child_env(config, run_dir, attempt_config_dir, attempt_log_dir)
    out: list[ProcessSpec] = []
    if config.inference is not None:
        out.append(inference_process(config.inference, resolved, logs, common))
    orchestrator = _cmd("orchestrator", resolved / "orchestrator.json")
    out.append(
        ProcessSpec("orchestrator", orchestrator, logs / "orchestrator.log", component_env(common, config.orchestrator))
    )
    trainer_cls = get_registry().get(TRAINERS, config.trainer.type)
    trainer_env = component_env({**common, **READ_CACHE_ENV}, config.trainer)
    out.extend(trainer_cls.rl_processes(config.trainer, resolved / "trainer.json", logs, trainer_env))
    return out


def component_env(common: dict[str, str], component) -> dict[str, str]:
    """One component's environment: the run's, then its own ``env_vars`` over it; prl's
    PRL_* run identity stays, since the child finds its run directory through it."""
    own = {k: str(v) for k, v in getattr(component, "env_vars", {}).items()}
    return {**common, **own, **{k: v for k, v in common.items() if k.startswith("PRL_")}}


def child_env(config, run_dir: Path, attempt_config_dir: Path, attempt_log_dir: Path) -> dict[str, str]:
    """Environment additions every child of a run gets (``prl rl`` and ``prl sft``)."""
    name = config.run.name or Path(run_dir).name
    return {
        **{k: str(v) for k, v in config.env_vars.items()},
        "PRL_RUN_NAME": name,
        "PRL_RUN_ID": name,
        "PRL_ATTEMPT_CONFIG_DIR": str(attempt_config_dir),
        "PRL_ATTEMPT_LOG_DIR": str(attempt_log_dir),
        "PYTHONUNBUFFERED": "1",
    }


def inference_process(inference: InferenceConfig, resolved: Path, logs: Path, common: dict[str, str]) -> ProcessSpec:
    """The managed inference server, a service that announces its URL in its ready file."""
    # The server writes its bound URL to the ready file (it learns where from
    # $PRL_READY_FILE); with a fixed port the launcher can poll /health as well.
    ready = resolved / "inference.address"
    server = inference.server
    health = f"http://{server.host}:{server.port}" if server.port else None
    # Weights come from the hub cache the launching command filled: one snapshot for all.
    env = {**component_env({**common, **READ_CACHE_ENV}, inference), "PRL_READY_FILE": str(ready)}
    argv = _cmd("inference", resolved / "inference.json")
    return ProcessSpec("inference", argv, logs / "inference.log", env, ready, service=True, health_url=health)
