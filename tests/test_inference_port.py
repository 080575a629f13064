"""The inference port from the user's side: ``--inference.server.port 0`` under ``prl rl``
and ``prl sft`` picks one free port that the server and every client agree on, and a port
that is already taken stops ``prl inference`` (either backend) and ``prl rl`` in one line
naming the flag, exit 2, before any server starts."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from prl.testing.configs import tiny_rl_toml, write_toml

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_launcher_local")
pytest.importorskip("prl_tasks_builtin")
pytest.importorskip("prl_trainer_torch")

EVAL = {"interval": 1, "num_examples": 2, "sampling": {"max_completion_tokens": 8}}
EVAL_SOURCE = {"name": "held-out", "env": {"taskset": {"id": "reverse-text"}}}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from prl_model_init.build import make_model

    return make_model(tmp_path_factory.mktemp("model") / "tiny", preset="tiny")


def _prl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "prl", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _resolved(tmp_path: Path, run: str) -> Path:
    return tmp_path / "outputs" / run / "configs" / "attempt_1" / "resolved"


@contextlib.contextmanager
def _held_port():
    """A loopback port some other process is listening on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        yield holder.getsockname()[1]


def _one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def _rl_toml(tmp_path: Path, model: Path) -> Path:
    """The tiny run with a fixed port in the file (the flag under test replaces it) and an
    online eval every step, which dials inference too."""
    overrides = {"inference": {"server": {"port": 8000}}, "orchestrator": {"eval": {**EVAL, "source": [EVAL_SOURCE]}}}
    return tiny_rl_toml(tmp_path, model, overrides)


@pytest.mark.parametrize("engines", [1, 2])
def test_rl_port_zero_resolves_to_one_free_port_for_server_and_client(tmp_path, model, engines):
    toml = _rl_toml(tmp_path, model)
    flags = ["--inference.server.port", "0", "--inference.server.engines", str(engines)]
    proc = _prl("rl", "@", str(toml), "--run.name", "d", *flags, "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    resolved = _resolved(tmp_path, "d")
    server = json.loads((resolved / "inference.json").read_text())["server"]
    client = json.loads((resolved / "orchestrator.json").read_text())["client"]
    assert server["port"] not in (0, 8000)
    assert client["base_url"] == f"http://127.0.0.1:{server['port']}"


def test_a_client_url_on_port_zero_means_the_managed_server(tmp_path, model):
    toml = _rl_toml(tmp_path, model)
    client = ["--orchestrator.client.base-url", "http://127.0.0.1:0"]
    proc = _prl("rl", "@", str(toml), "--run.name", "d", "--inference.server.port", "0", *client, "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    resolved = _resolved(tmp_path, "d")
    port = json.loads((resolved / "inference.json").read_text())["server"]["port"]
    assert json.loads((resolved / "orchestrator.json").read_text())["client"]["base_url"].endswith(f":{port}")
    assert port != 0


def test_sft_port_zero_resolves_to_one_free_port_for_server_and_online_eval(tmp_path, model):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": [{"role": "user", "content": "ab"}], "completion": "ba"}) + "\n")
    config = {
        "max_steps": 1,
        "output_dir": str(tmp_path / "outputs"),
        "model": {"name": str(model)},
        "data": {"name": str(data), "seq_len": 64, "batch_size": 1},
        "inference": {"server": {"port": 8000}},
        "eval": {**EVAL, "source": [EVAL_SOURCE]},
    }
    toml = write_toml(tmp_path / "sft.toml", config)
    proc = _prl("sft", "@", str(toml), "--run.name", "d", "--inference.server.port", "0", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    resolved = _resolved(tmp_path, "d")
    port = json.loads((resolved / "inference.json").read_text())["server"]["port"]
    sft = json.loads((resolved / "sft.json").read_text())
    assert port not in (0, 8000) and sft["inference"]["server"]["port"] == port
    assert sft["eval"]["client"]["base_url"] == f"http://127.0.0.1:{port}"


BACKENDS = ["torch"]
if importlib.util.find_spec("prl_inference_vllm") is not None:
    BACKENDS.append("vllm")  # the check comes before the backend: no vLLM engine is built


@pytest.mark.parametrize("backend", BACKENDS)
def test_prl_inference_on_a_taken_port_is_one_line_naming_the_flag(model, backend):
    with _held_port() as port:
        proc = _prl("inference", "--model.name", str(model), "--backend.type", backend, "--server.port", str(port))
    assert _one_line(proc) == (
        f"Environment error: --server.port {port}: port {port} on 127.0.0.1 is already in use; "
        "stop the process that holds it or choose another port (--server.port 0 picks a free one)"
    )


def test_prl_inference_with_a_taken_engine_port_is_one_line_before_any_engine_starts(model):
    with _held_port() as port:
        engines = ["--server.engines", "2", "--server.backend-port", str(port - 1)]
        proc = _prl("inference", "--model.name", str(model), "--server.port", "0", *engines)
    assert _one_line(proc).startswith(f"Environment error: --server.backend-port {port}: port {port} on 127.0.0.1 ")
    assert "engine 0: pid" not in proc.stdout


@pytest.mark.slow
def test_prl_rl_with_port_zero_runs_to_the_end_behind_a_router(tmp_path, model):
    """Two steps and an online eval each step: the orchestrator, its eval and the router's
    two engines all meet on the port picked at launch."""
    toml = _rl_toml(tmp_path, model)
    flags = ["--inference.server.port", "0", "--inference.server.engines", "2", "--inference.server.backend-port", "0"]
    proc = _prl("rl", "@", str(toml), "--run.name", "e2e", *flags, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "[orchestrator] Step 2 |" in proc.stdout and "[trainer] Step 2 |" in proc.stdout
    assert "[orchestrator] Step 2 | orch | held-out avg@1" in proc.stdout  # the online eval got answers
    run_dir = tmp_path / "outputs" / "e2e"
    port = json.loads((_resolved(tmp_path, "e2e") / "inference.json").read_text())["server"]["port"]
    router_log = (run_dir / "logs" / "attempt_1" / "inference.log").read_text()
    assert f"router: 2 engines behind http://127.0.0.1:{port}" in router_log
