"""One tiny model and one server subprocess per test session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prl.testing.inference_contract import InferenceServer


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    from prl_model_init import make_model

    return str(make_model(tmp_path_factory.mktemp("model") / "tiny", preset="tiny", seed=0))


def start_server(cfg: dict, workdir: Path, timeout: float = 120.0) -> tuple[subprocess.Popen, str]:
    """Start ``python -m prl_inference_torch cfg.json``; return the process and its base URL."""
    ready = workdir / "ready"
    cfg = {**cfg, "backend": {"type": "torch", "ready_file": str(ready), **cfg.get("backend", {})}}
    (workdir / "inference.json").write_text(json.dumps(cfg))
    log = open(workdir / "server.log", "w")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PRL_API_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "prl_inference_torch", str(workdir / "inference.json")],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"server did not start:\n{(workdir / 'server.log').read_text()[-3000:]}")
        time.sleep(0.2)
    return proc, ready.read_text().strip()


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def inference_server(tiny_model, tmp_path_factory) -> InferenceServer:
    workdir = tmp_path_factory.mktemp("server")
    backend = {"max_batch_size": 8, "max_prefill_tokens": 256, "dtype": "float32", "num_threads": 1}
    proc, url = start_server({"model": {"name": tiny_model}, "server": {"port": 0}, "backend": backend}, workdir)
    yield InferenceServer(base_url=url, model_dir=tiny_model)
    stop_server(proc)


@pytest.fixture(scope="session")
def server_process():
    """``(start_server, stop_server)`` for tests that need a server with a config of their own."""
    return start_server, stop_server
