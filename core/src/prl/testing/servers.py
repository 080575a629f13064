"""Start a frozen model's server the way a user does, for tests: ``prl inference`` on loopback.

Frozen models (an opd teacher, an sft sampler) are the user's to start; tests of the
algorithms that read them start one with :func:`running_inference` and stop it after.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def running_inference(model: str | Path, workdir: Path, *flags: str, timeout: float = 180.0) -> Iterator[str]:
    """Run ``prl inference --model.name <model> --server.port 0`` (torch backend unless
    ``flags`` choose another) and yield its base URL; stop it on exit.

    ``flags`` are extra ``prl inference`` flags. The server log is ``workdir/inference.log``.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    ready = workdir / "ready"
    ready.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "prl", "inference", "--model.name", str(model), "--server.host", "127.0.0.1"]
    cmd += ["--server.port", "0", "--backend.ready_file", str(ready), *flags]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PRL_API_KEY", None)
    log_path = workdir / "inference.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not ready.exists() or not ready.read_text().strip():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prl inference did not start:\n{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield ready.read_text().strip()
    finally:
        # The server leads its own process group; vLLM's engine processes are in it too.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
