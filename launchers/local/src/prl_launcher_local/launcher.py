"""Local launcher: start, supervise and stop a run's processes on this machine.

Order: services first (``ProcessSpec.service``: ready once their ``ready_file`` holds a URL
and/or ``health_url`` answers), then, once every service is ready, the others. Supervision
polls every child; the first one that exits non-zero (or a service that exits at all) stops
the run: the others get SIGTERM, then SIGKILL after ``stop_timeout``, and the launcher
returns that child's exit code (1 for a service that exited cleanly), naming it and showing
the last lines of its log. Exit code 2 is a usage error (a bad config field or data row):
the launcher prints only the child's one-line message and returns 2. SIGINT and SIGTERM to
the launcher stop every child the same way and return 128 + the signal number. The run
succeeds when every non-service child has exited with code 0.

GPUs are placed by ``ProcessSpec.role``: ``inference`` gets devices 0..num_infer_gpus-1 and
``trainer`` the next num_train_gpus (``CUDA_VISIBLE_DEVICES``), when GPU counts are set;
``infer_gpu_ids`` / ``train_gpu_ids`` choose them explicitly, and overlapping ids need
``shared_gpus = true``.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from prl import procinfo
from prl.contracts.launcher import Launcher, LauncherConfig, ProcessSpec
from prl_launcher_local.children import Child, exit_code, stop_all

POLL_S = 0.1
USAGE_EXIT = 2
SAY_EVERY_S = 15.0


class RunStopped(Exception):
    """The run must stop; ``code`` is the launcher's exit code."""

    def __init__(self, code: int) -> None:
        self.code = code


class LocalLauncher(Launcher):
    """Runs every process on this machine (see the module docstring)."""

    type: ClassVar[str] = "local"
    is_default: ClassVar[bool] = True
    reference_types: ClassVar[tuple[str, ...]] = ("single_node",)

    class Config(LauncherConfig):
        type: Literal["local"] = "local"
        """Selects this launcher."""
        gpus_per_node: Annotated[int, Field(ge=0)] | None = None
        """GPUs on this machine; None: what it has (nvidia-smi -L or CUDA_VISIBLE_DEVICES,
        checked before launch and by --dry-run)."""
        num_infer_gpus: Annotated[int, Field(ge=0)] = 0
        """GPUs given to inference (CUDA_VISIBLE_DEVICES 0..n-1, or infer_gpu_ids); with
        several, one engine per GPU behind a router (inference.server.engines)."""
        num_train_gpus: Annotated[int, Field(ge=0)] = 0
        """GPUs given to the trainer (the ones after inference's, or train_gpu_ids)."""
        infer_gpu_ids: list[Annotated[int, Field(ge=0)]] | None = None
        """Explicit inference GPU ids (sets num_infer_gpus to their count)."""
        train_gpu_ids: list[Annotated[int, Field(ge=0)]] | None = None
        """Explicit trainer GPU ids (sets num_train_gpus to their count)."""
        shared_gpus: bool = False
        """Let trainer and inference GPU ids overlap (both on the same GPUs); without it an
        overlap is an error."""
        startup_timeout: Annotated[float, Field(gt=0)] = 600.0
        """Seconds to wait for each server (inference) to become ready."""
        stop_timeout: Annotated[float, Field(gt=0)] = 30.0
        """Seconds a child gets to exit after SIGTERM before it is killed."""

        @model_validator(mode="after")
        def _fits(self):
            for role in ("infer", "train"):
                ids, count = getattr(self, f"{role}_gpu_ids"), f"num_{role}_gpus"
                if ids is None:
                    continue
                if len(set(ids)) != len(ids):
                    raise ValueError(f"{role}_gpu_ids {ids} lists a GPU twice")
                if getattr(self, count) not in (0, len(ids)):
                    raise ValueError(f"{count} ({getattr(self, count)}) differs from len({role}_gpu_ids {ids})")
                setattr(self, count, len(ids))
            infer, train = self.placement()
            both = sorted(set(infer) & set(train))
            if both and not self.shared_gpus:
                raise ValueError(
                    f"train GPU ids {train} and inference GPU ids {infer} overlap on {both}; give each its own "
                    "GPUs or set deployment.shared_gpus = true to share them"
                )
            need = len(set(infer) | set(train))
            if self.gpus_per_node is not None and max([-1, *infer, *train]) >= self.gpus_per_node:
                raise ValueError(
                    f"num_train_gpus ({self.num_train_gpus}) + num_infer_gpus ({self.num_infer_gpus}) "
                    f"exceeds gpus_per_node ({self.gpus_per_node})"
                    if need > self.gpus_per_node
                    else f"GPU ids {sorted(set(infer) | set(train))} go beyond gpus_per_node ({self.gpus_per_node})"
                )
            return self

        def placement(self) -> tuple[list[int], list[int]]:
            """(inference GPU ids, trainer GPU ids)."""
            n_infer, n_train = self.num_infer_gpus, self.num_train_gpus
            infer = list(self.infer_gpu_ids) if self.infer_gpu_ids is not None else list(range(n_infer))
            if self.train_gpu_ids is not None:
                return infer, list(self.train_gpu_ids)
            start = 0 if self.shared_gpus else max([-1, *infer]) + 1
            return infer, list(range(start, start + n_train))

        def gpu_ids(self) -> set[int]:
            infer, train = self.placement()
            return set(infer) | set(train)

    def launch(self, processes: list[ProcessSpec]) -> int:
        children = [Child(self._placed(p)) for p in processes]
        self._signal: int | None = None
        restore = self._install_signals()
        try:
            servers = [c for c in children if c.is_server]
            for child in servers:
                self._start(child)
            self._wait_ready(servers, children)
            for child in children:
                if not child.is_server:
                    self._start(child)
            return self._supervise(children)
        except RunStopped as stop:
            return stop.code
        finally:
            stop_all([c for c in children if c.proc is not None], self.config.stop_timeout)
            restore()

    def dry_run(self, processes: list[ProcessSpec]) -> None:
        for p in processes:
            print(f"{p.name}: {' '.join(p.argv)}  > {p.log_path}")

    # ---- internals ----------------------------------------------------------------------
    def _start(self, child: Child) -> None:
        """Start ``child`` and list its pid next to its log (``processes.jsonl``, for the stall
        watchdog and for users looking for the process)."""
        child.start()
        log_path = child.spec.log_path
        procinfo.record(log_path.parent, child.name, child.proc.pid, log_path)

    def _placed(self, spec: ProcessSpec) -> ProcessSpec:
        """``spec`` with CUDA_VISIBLE_DEVICES for its role: inference first, then trainer."""
        infer, train = self.config.placement()
        ids = {"inference": infer, "trainer": train}.get(spec.role)
        if not (infer or train) or not ids:
            return spec
        # Ids count among the devices this launcher may use: under a CUDA_VISIBLE_DEVICES of
        # its own (a shared machine, a SLURM allocation) id 0 is the first one listed there.
        mine = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        devices = [mine[i] if i < len(mine) else str(i) for i in ids]
        # A copy: the caller's plan stays as it was given (a dry run or a retry reuses it).
        return dataclasses.replace(spec, env={**spec.env, "CUDA_VISIBLE_DEVICES": ",".join(devices)})

    def _install_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def handler(signum, frame):
            self._signal = signum

        for sig in previous:
            signal.signal(sig, handler)

        def restore():
            for sig, old in previous.items():
                signal.signal(sig, old)

        return restore

    def _check(self, children: list[Child]) -> list[Child]:
        """Raise RunStopped on a signal or a failed child; return the children still running."""
        if self._signal is not None:
            name = signal.Signals(self._signal).name
            alive = sum(c.poll() is None and c.proc is not None for c in children)
            print(f"prl: {name} received; stopping {alive} processes", file=sys.stderr, flush=True)
            raise RunStopped(128 + self._signal)
        running = []
        for child in children:
            code = child.poll()
            if code is None:
                if child.proc is not None:
                    running.append(child)
            elif code != 0 or child.is_server:
                # Kept beside its pid for the end-of-run summary (prl.summary), which names it.
                procinfo.record_exit(child.spec.log_path.parent, child.name, code)
                self._report_death(child, code)
                raise RunStopped(exit_code(code) or 1)
        return running

    def _report_death(self, child: Child, code: int) -> None:
        child.join(1.0)
        if code == USAGE_EXIT:  # the child already said what is wrong, in one line
            print(f"prl: {child.name}: {child.last_line()}", file=sys.stderr, flush=True)
            return
        how = f"exited with code {code}" if code >= 0 else f"was killed by {signal.Signals(-code).name}"
        print(
            f"prl: process '{child.name}' {how}; stopping the others. Last lines of {child.spec.log_path}:\n"
            f"{child.last_lines()}",
            file=sys.stderr,
            flush=True,
        )

    def _wait_ready(self, servers: list[Child], children: list[Child]) -> None:
        started = time.monotonic()
        said = started
        pending = list(servers)
        while pending:
            self._check(children)
            pending = [c for c in pending if not c.ready()]
            now = time.monotonic()
            if pending and now - started > self.config.startup_timeout:
                child = pending[0]
                print(
                    f"prl: gave up waiting for {child.waiting_for()} after {self.config.startup_timeout:g}s. "
                    f"Last lines of {child.spec.log_path}:\n{child.last_lines()}",
                    file=sys.stderr,
                    flush=True,
                )
                raise RunStopped(1)
            if pending and now - said >= SAY_EVERY_S:
                said = now
                for child in pending:
                    print(f"prl: waiting for {child.waiting_for()} ({now - started:.0f} s)", flush=True)
            if pending:
                time.sleep(POLL_S)

    def _supervise(self, children: list[Child]) -> int:
        jobs = [c for c in children if not c.is_server]
        while True:
            self._check(children)
            if all(c.poll() == 0 for c in jobs):
                return 0
            time.sleep(POLL_S)
