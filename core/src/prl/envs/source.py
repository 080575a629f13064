"""One train or eval source: its taskset, its tasks and, when needed, its env server.

Where rollouts run:

* in process: the taskset's class says ``in_process = True`` (offline tasksets) and no
  ``env.serve.address`` is given; ``rollout`` awaits ``taskset.rollout`` directly;
* behind an env server: ``env.serve.address`` names a server managed elsewhere, or the
  taskset needs its own process (``in_process = False``, or ``env.serve.isolate``): ``start`` then uses the server
  of this attempt that already published ``resolved/envs/<split>/<name>.address`` (one
  started by hand), else spawns ``prl env-server @ resolved/envs/<split>/<name>.json``
  (logging to ``logs/attempt_N/envs/<split>/<name>.log``), waits for it to publish the
  address, and stops it on ``close``.

The wire protocol is the taskset's own when its class provides ``connect(address)`` (and
``serve`` on the server side), else prl's JSON protocol (:mod:`prl.envs.protocol`).

``rollout`` never raises: failures and ``env.timeout`` become recorded traces
(:mod:`prl.envs.guard`). A dead env server is reported only by :meth:`EnvSource.check_alive`,
which raises :class:`EnvServerDied` naming the source, so the orchestrator applies
``env.on_failure`` in one place.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prl import procinfo
from prl.config.components import SourceConfig
from prl.config.errors import ConfigError
from prl.contracts.inference import InferenceClient
from prl.contracts.renderer import Renderer
from prl.contracts.taskset import Task, Taskset
from prl.envs.guard import failed_trace, guarded
from prl.envs.protocol import ProtocolClient
from prl.fsutil import write_atomic
from prl.logs import child_env as child_log_env
from prl.types import Sampling, Trace

log = logging.getLogger(__name__)


# Set in a spawned env server's environment to this process's pid (prl.envs.server).
PARENT_ENV = "PRL_ENV_SERVER_PARENT"


class EnvServerDied(RuntimeError):
    """The env server of a source is gone; ``source`` names it."""

    def __init__(self, source: str, detail: str = "") -> None:
        self.source = source
        super().__init__(f"env server of source '{source}' died{': ' + detail if detail else ''}")


def build_taskset(source: SourceConfig) -> Taskset:
    """Instantiate the taskset plugin selected by ``source.env.taskset.id``."""
    taskset = source.env.taskset.build()
    # Tasksets that drive an agent harness read it from here (verifiers' agent/runtime).
    taskset.env_config = source.env  # type: ignore[attr-defined]
    return taskset


def select_tasks(tasks: list[Task], source: SourceConfig) -> list[Task]:
    """Apply ``source.select``: keep ``include`` (all when None) minus ``exclude``, skip the
    first N, shuffle (seeded), then keep ``limit``. An included or excluded id the taskset
    does not have is a usage error: a typo would otherwise evaluate the wrong examples."""
    sel = source.select
    ids = {t.task_id for t in tasks}
    for field in ("include", "exclude"):
        unknown = [i for i in getattr(sel, field) or [] if i not in ids]
        if unknown:
            raise ConfigError(
                f"select.{field} of source '{source.name}': no task {', '.join(map(repr, unknown[:3]))} "
                f"in this split (task ids look like {next(iter(sorted(ids)), '?')!r})"
            )
    keep = (set(sel.include) if sel.include is not None else ids) - set(sel.exclude)
    out = [t for t in tasks if t.task_id in keep][sel.skip :]
    if sel.shuffle:
        random.Random(source.sampler.seed).shuffle(out)
    if sel.limit is not None:
        out = out[: sel.limit]
    return out


class EnvSource:
    """Tasks and guarded rollouts of one source (see the module docstring)."""

    def __init__(
        self, source: SourceConfig, split: str, run_dir: Path | None, attempt_config_dir: Path | None = None
    ) -> None:
        self.source = source
        self.name = source.name
        self.split = split
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.attempt_config_dir = Path(attempt_config_dir) if attempt_config_dir is not None else None
        self.taskset = build_taskset(source)
        self._tasks: list[Task] | None = None
        self._remote: Any = None
        self._process: subprocess.Popen | None = None
        self._log_file: Any = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    # ---- lifecycle -------------------------------------------------------------------
    @property
    def remote(self) -> bool:
        serve = self.source.env.serve
        return serve.address is not None or serve.isolate or not getattr(self.taskset, "in_process", True)

    @property
    def address(self) -> str | None:
        return getattr(self._remote, "address", None)

    @property
    def pid(self) -> int | None:
        """The pid of the env server this source spawned (None: in process, or started elsewhere)."""
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> str | None:
        """The log file of the env server this source spawned."""
        return self._log_file.name if self._log_file is not None else None

    async def start(self) -> None:
        if not self.remote:
            return
        address = self.source.env.serve.address or self._published() or await self._spawn()
        self._remote = self._connect(address)
        if not await self._remote.health():
            raise EnvServerDied(self.name, f"no healthy env server at {address}")

    def _published(self) -> str | None:
        """The address of a server for this attempt already started by hand or a launcher."""
        if self.attempt_config_dir is None:
            return None
        address_file = self.attempt_config_dir / "resolved" / "envs" / self.split / f"{self.name}.address"
        if address_file.exists():
            address = address_file.read_text().strip()
            if address and _reachable(address):
                log.info("source '%s' uses the env server already listening on %s", self.name, address)
                return address
        return None

    def _connect(self, address: str) -> Any:
        connect = getattr(self.taskset, "connect", None)
        return connect(address) if connect is not None else ProtocolClient(address)

    async def _spawn(self) -> str:
        config_path = self._config_path()
        address_file = config_path.with_suffix(".address")
        address_file.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "prl", "env-server", "@", str(config_path)]
        env = {**os.environ, **child_log_env()}
        # The server's own tools (e.g. uv for verifiers harnesses) live next to this Python.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        # The server stops when this process is gone, even killed outright (server.py).
        env[PARENT_ENV] = str(os.getpid())
        self._process = subprocess.Popen(cmd, stdout=self._log_target(), stderr=subprocess.STDOUT, env=env)
        log.info("env server of source '%s' started (pid %d): %s", self.name, self._process.pid, " ".join(cmd))
        # Listed with the launcher's processes, so the stall watchdog and users find it.
        procinfo.record(os.environ.get("PRL_ATTEMPT_LOG_DIR"), f"env-server {self.split}/{self.name}",
                        self._process.pid, self.log_path)  # fmt: skip
        deadline = time.monotonic() + self.source.env.serve.startup_timeout
        while time.monotonic() < deadline:
            if address_file.exists():
                return address_file.read_text().strip()
            if self._process.poll() is not None:
                raise EnvServerDied(
                    self.name,
                    f"exited with code {self._process.returncode} before publishing {address_file}{self._log_hint()}",
                )
            await asyncio.sleep(0.1)
        self._stop_process()
        raise EnvServerDied(
            self.name,
            f"did not publish {address_file} within {self.source.env.serve.startup_timeout:g}s{self._log_hint()}",
        )

    def _config_path(self) -> Path:
        """resolved/envs/<split>/<name>.json: the launcher's copy, else one written here."""
        if self.attempt_config_dir is not None:
            base = self.attempt_config_dir / "resolved"
        elif self.run_dir is not None:
            base = self.run_dir / "configs" / "latest" / "resolved"
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="prl-env-")
            base = Path(self._tmp.name)
        path = base / "envs" / self.split / f"{self.name}.json"
        if not path.exists():
            write_atomic(path, json.dumps(self.source.model_dump(mode="json"), indent=2))
        return path

    def _log_target(self) -> Any:
        log_dir = os.environ.get("PRL_ATTEMPT_LOG_DIR")
        if not log_dir and self.run_dir is not None:
            attempt = self.attempt_config_dir.name if self.attempt_config_dir is not None else "latest"
            log_dir = str(self.run_dir / "logs" / attempt)
        if not log_dir:
            return None  # inherit the parent's stderr
        path = Path(log_dir) / "envs" / self.split / f"{self.name}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(path, "ab", buffering=0)  # noqa: SIM115 - lives as long as the server
        return self._log_file

    def _log_hint(self) -> str:
        return f"; see {self._log_file.name}" if self._log_file is not None else ""

    async def close(self) -> None:
        if self._remote is not None:
            await self._remote.close()
            self._remote = None
        self._stop_process()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _stop_process(self) -> None:
        proc, self._process = self._process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # ---- work ------------------------------------------------------------------------
    def tasks(self) -> list[Task]:
        if self._tasks is None:
            # the role (train/eval) names files; the taskset's own split, when set, the data
            split = getattr(self.source.env.taskset, "split", None) or self.split
            self._tasks = select_tasks(list(self.taskset.tasks(split)), self.source)
        return list(self._tasks)

    async def rollout(
        self, task: Task, client: InferenceClient, renderer: Renderer, sampling: Sampling, policy_version: int
    ) -> Trace:
        timeout = self.source.env.timeout
        if not self.remote:
            return await guarded(
                self.taskset.rollout(task, client, renderer, sampling), task, self.name, policy_version, timeout
            )
        if self._remote is None:
            return failed_trace(
                task, self.name, policy_version, f"RuntimeError: env source '{self.name}' is not started"
            )
        work = self._remote.rollout(task, client, renderer, sampling, policy_version)
        if getattr(self._remote, "enforces_timeout", False):
            timeout += 30.0  # the server times the rollout itself; the margin covers transport
        return await guarded(work, task, self.name, policy_version, timeout)

    def check_alive(self) -> None:
        """Raise :class:`EnvServerDied` when this source's env server is gone."""
        if not self.remote:
            return
        if self._process is not None:
            code = self._process.poll()
            if code is not None:
                raise EnvServerDied(self.name, f"exited with code {code}{self._log_hint()}")
            return
        address = self.address or self.source.env.serve.address
        if address and not _reachable(address):
            raise EnvServerDied(self.name, f"{address} refuses connections")


def _reachable(address: str) -> bool:
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2.0):
            return True
    except OSError:
        return False
