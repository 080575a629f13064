"""``prl inference`` with ``server.engines = N > 1``: N engine processes behind one router.

Engine i is ``prl inference`` on its own resolved config (``server.port = backend_port + i``,
``engines = 1``, loopback), written next to the run's resolved configs
(``resolved/inference/engine_<i>.json``) or into a temporary directory for a bare
``prl inference``. It sees only its own GPUs: this process's ``CUDA_VISIBLE_DEVICES`` (the
launcher's inference GPUs), or 0..N*k-1 when unset, cut into N consecutive groups of
k = the backend's worker count (vLLM: tensor x data parallel size). Its output goes to
``logs/.../inference/engine_<i>.log``.

Once every engine answers ``/health`` the router (:mod:`prl.router`) binds ``server.port``
and writes the ready file, so a launcher waiting on it sees one server. An engine that exits
stops the others and this process (exit 1, naming the engine and its log); SIGTERM stops
them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from prl.config.errors import ConfigError
from prl.procs import stop_processes
from prl.serving import admin_api_key, announce, bind, free_port, ready_file

if TYPE_CHECKING:
    from prl.config.components import InferenceConfig

POLL_S = 0.5
STOP_GRACE_S = 20.0


def resolve_engines(inference: InferenceConfig, deployment) -> int:
    """``server.engines`` for a launched run: as given, else one engine per inference GPU's
    worth of ``[deployment] num_infer_gpus`` (at least 1); written into the config."""
    per_engine = inference.backend.worker_count()
    gpus = getattr(deployment, "num_infer_gpus", 0) or 0
    engines = inference.server.engines or max(1, gpus // per_engine)
    if gpus and engines * per_engine > gpus:
        raise ConfigError(
            f"inference.server.engines: {engines} engines of {per_engine} GPU(s) need {engines * per_engine} GPUs, "
            f"but [deployment] num_infer_gpus is {gpus}"
        )
    inference.server.engines = engines
    return engines


def engine_devices(engines: int, per_engine: int, visible: str | None) -> list[str]:
    """Each engine's CUDA_VISIBLE_DEVICES (see the module docstring)."""
    ids = [d.strip() for d in visible.split(",") if d.strip()] if visible else []
    ids = ids or [str(i) for i in range(engines * per_engine)]
    if len(ids) < engines * per_engine:
        raise ConfigError(
            f"inference.server.engines: {engines} engines of {per_engine} GPU(s) need {engines * per_engine} "
            f"devices, but CUDA_VISIBLE_DEVICES gives {len(ids)} ({visible})"
        )
    return [",".join(ids[i * per_engine : (i + 1) * per_engine]) for i in range(engines)]


def engine_configs(cfg: InferenceConfig, engines: int) -> list[InferenceConfig]:
    """Engine i's resolved config: its own loopback port, one engine, no ready file."""
    ports = [cfg.server.backend_port + i if cfg.server.backend_port else free_port("127.0.0.1") for i in range(engines)]
    out = []
    for port in ports:
        engine = cfg.model_copy(deep=True)
        engine.server.host, engine.server.port = "127.0.0.1", port
        engine.server.engines, engine.server.ready_file = 1, None
        if hasattr(engine.backend, "ready_file"):
            engine.backend.ready_file = None
        out.append(engine)
    return out


def start_engines(cfg: InferenceConfig, engines: int, scratch: Path) -> list[tuple[subprocess.Popen, str, Path | None]]:
    """Start the engines; (process, base URL, log path) each. Their configs go to the run's
    attempt directory, else to ``scratch``; their logs to the run's, else to our output."""
    per_engine = cfg.backend.worker_count()
    devices = engine_devices(engines, per_engine, os.environ.get("CUDA_VISIBLE_DEVICES"))
    config_dir, log_dir = os.environ.get("PRL_ATTEMPT_CONFIG_DIR"), os.environ.get("PRL_ATTEMPT_LOG_DIR")
    configs = Path(config_dir) / "resolved" / "inference" if config_dir else scratch
    logs = Path(log_dir) / "inference" if log_dir else None
    configs.mkdir(parents=True, exist_ok=True)
    started = []
    for i, (engine, gpus) in enumerate(zip(engine_configs(cfg, engines), devices, strict=True)):
        path = configs / f"engine_{i}.json"
        path.write_text(engine.model_dump_json(indent=2) + "\n")
        # Not the router's ready file: engines must not announce the run's address.
        env = {k: v for k, v in os.environ.items() if k != "PRL_READY_FILE"} | {"CUDA_VISIBLE_DEVICES": gpus}
        log = logs / f"engine_{i}.log" if logs else None
        out = None
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            out = open(log, "ab")  # noqa: SIM115 - closed once the engine has it
        argv = [sys.executable, "-m", "prl", "inference", "@", str(path)]
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        if out is not None:
            out.close()  # the engine holds its own copy
        print(f"engine {i}: pid {proc.pid}, CUDA_VISIBLE_DEVICES={gpus}, port {engine.server.port}", flush=True)
        started.append((proc, f"http://127.0.0.1:{engine.server.port}", log))
    return started


def serve_engines(cfg: InferenceConfig, engines: int) -> int:
    """Start ``engines`` engines, route ``server.port`` to them, serve until stopped."""
    admin_api_key(cfg.server)
    sock = bind(cfg.server.host, cfg.server.port)  # a taken port fails before engines load
    with _stop_signals() as stop, tempfile.TemporaryDirectory(prefix="prl-engines-") as scratch:
        procs = start_engines(cfg, engines, Path(scratch))
        try:
            return asyncio.run(_serve(cfg, sock, [url for _, url, _ in procs], procs, stop))
        finally:
            stop_processes([proc for proc, _, _ in procs], STOP_GRACE_S)


def serve_router(cfg: InferenceConfig, backends: list[str]) -> int:
    """Route ``server.port`` to engines started elsewhere (other nodes) at ``backends``."""
    admin_api_key(cfg.server)
    sock = bind(cfg.server.host, cfg.server.port)
    with _stop_signals() as stop:
        return asyncio.run(_serve(cfg, sock, [b.rstrip("/") for b in backends], [], stop))


@contextlib.contextmanager
def _stop_signals() -> Iterator[list[int]]:
    """SIGTERM and SIGINT append their number to the yielded list (the serve loop polls it
    and shuts down in order) instead of interrupting; the old handlers come back after."""
    stop: list[int] = []
    previous = {s: signal.signal(s, lambda n, f: stop.append(n)) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


async def _serve(cfg: InferenceConfig, sock, backends: list[str], procs, stop: list[int]) -> int:
    from prl.router import Router

    router = Router(backends, cfg.backend.worker_count(), cfg.server.limits.max_body_bytes)
    try:
        code = await _wait_healthy(router, procs, stop)
        if code is not None:
            return code
        server = await router.serve(sock)
        url = announce(sock, ready_file(cfg))
        print(f"router: {len(backends)} engines behind {url}", flush=True)
        try:
            while not stop:
                if (code := _dead(procs)) is not None:
                    return code
                await asyncio.sleep(POLL_S)
            return 128 + stop[0]
        finally:
            server.close()
    finally:
        await router.aclose()


async def _wait_healthy(router, procs, stop: list[int]) -> int | None:
    """None once every engine answers /health; else the exit code (an engine died, a signal)."""
    started, said = time.monotonic(), 0.0
    while not stop:
        if (code := _dead(procs)) is not None:
            return code
        if (await router.health())[0] == 200:
            return None
        if time.monotonic() - said > 15:
            said = time.monotonic()
            print(f"router: waiting for {len(router.backends)} engines ({said - started:.0f} s)", flush=True)
        await asyncio.sleep(POLL_S)
    return 128 + stop[0]


def _dead(procs) -> int | None:
    """1 when an engine has exited (said with its log), else None."""
    for i, (proc, url, log) in enumerate(procs):
        code = proc.poll()
        if code is not None:
            tail = ""
            if log is not None and log.exists():
                tail = "\n".join("    " + line for line in log.read_text(errors="replace").splitlines()[-20:])
            print(f"prl: inference engine {i} ({url}) exited with code {code}; log: {log}\n{tail}", flush=True)
            return code if code == 2 else 1
    return None


def main(argv: list[str] | None = None) -> int:
    """``python -m prl.engines <resolved inference.json> <engine URL>...``: only the router,
    in front of engines another launcher started (one per SLURM inference node)."""
    from prl.config.components import InferenceConfig

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m prl.engines <resolved inference.json> <engine URL>...", file=sys.stderr)
        return 2
    cfg = InferenceConfig.model_validate_json(Path(args[0]).read_text())
    return serve_router(cfg, args[1:])


if __name__ == "__main__":
    sys.exit(main())
