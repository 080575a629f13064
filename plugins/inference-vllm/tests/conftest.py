"""One real vLLM server per test session (vLLM on CPU takes a minute or more to start).

The server runs ``python -m prl_inference_vllm <config.json>`` on a tiny random model in
float32 with eager execution, LoRA on and an admin key set, so the contract suite, the
LoRA route and the bearer-token checks all run against the one process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prl.testing.inference_contract import InferenceServer

API_KEY = "vllm-test-key"
START_TIMEOUT_S = float(os.environ.get("PRL_VLLM_START_TIMEOUT", "600"))
# Above what any other test asks for (n 3, max_tokens 400, prompts of a few tokens; max_tokens
# 511 is the most room any prompt has in the 512 context), so only
# test_limits.py meets them.
LIMITS = {"max_n": 64, "max_prompt_tokens": 500, "max_tokens": 511, "max_body_bytes": 4 * 1024 * 1024}


def server_config(model_dir: Path, ready_file: Path, server: dict | None = None, **backend) -> dict:
    return {
        "model": {"name": str(model_dir)},
        "server": {"host": "127.0.0.1", "port": 0, "api_key": API_KEY, "limits": LIMITS, **(server or {})},
        "max_model_len": 512,
        "backend": {
            "type": "vllm",
            "dtype": "float32",
            "gpu_memory_utilization": 0.3,
            "enforce_eager": True,
            "enable_lora": True,
            "max_lora_rank": 8,
            "max_num_seqs": 16,
            "ready_file": str(ready_file),
            **backend,
        },
    }


def start_server(
    workdir: Path, model_dir: Path, server: dict | None = None, **backend
) -> tuple[subprocess.Popen, str, float, Path]:
    """Start the backend (``server``: settings over the defaults); return (process, base URL,
    seconds to ready, log path)."""
    ready, log_path = workdir / "ready.txt", workdir / "server.log"
    cfg = workdir / "inference.json"
    cfg.write_text(json.dumps(server_config(model_dir, ready, server, **backend)))
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("PRL_API_KEY", None)
    t0 = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "prl_inference_vllm", str(cfg)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() - t0 > START_TIMEOUT_S:
            stop_server(proc)
            tail = log_path.read_text(errors="replace")[-4000:]
            pytest.fail(f"vLLM server did not become ready (exit {proc.returncode}):\n{tail}")
        time.sleep(0.5)
    return proc, ready.read_text().strip(), time.monotonic() - t0, log_path


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (engine core and workers are its children)."""
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    make_model = pytest.importorskip("prl_model_init").make_model

    return make_model(tmp_path_factory.mktemp("model") / "tiny", preset="tiny", seed=0)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory, tiny_model):
    pytest.importorskip("vllm")
    workdir = tmp_path_factory.mktemp("vllm-server")
    proc, url, seconds, log_path = start_server(workdir, tiny_model)
    print(f"\nvLLM server ready at {url} after {seconds:.1f} s", file=sys.stderr)
    (workdir / "startup_seconds.txt").write_text(f"{seconds:.1f}\n")
    try:
        yield {"url": url, "seconds": seconds, "log": log_path, "proc": proc, "model_dir": tiny_model}
    finally:
        stop_server(proc)


@pytest.fixture(scope="session")
def inference_server(vllm_server) -> InferenceServer:
    return InferenceServer(base_url=vllm_server["url"], model_dir=str(vllm_server["model_dir"]), api_key=API_KEY)


@pytest.fixture(scope="session")
def server_process():
    """``(start_server, api_key)`` for tests that need a vLLM server of their own."""
    return start_server, API_KEY
