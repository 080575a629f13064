"""Whole runs from hub names only, against the local Hugging Face Hub: `prl rl` on both
inference backends, `prl fetch` then an offline `prl sft` from a hub dataset, and
`prl inference` + `prl eval`. The model and the data exist nowhere but on the hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from prl.testing.configs import VLLM_CPU_FLAGS, tiny_rl_toml

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_trainer_torch")
pytest.importorskip("prl_tasks_builtin")

MODEL, DATA = "prl-test/tiny", "prl-test/reverse"  # served by the `hub` fixture (conftest.py)


def _weights(hub) -> list[str]:
    return [f for f in hub.file_downloads(MODEL) if f.endswith(".safetensors")]


@pytest.mark.slow
@pytest.mark.parametrize("backend", [[], pytest.param(VLLM_CPU_FLAGS, marks=pytest.mark.vllm, id="vllm")])
def test_prl_rl_from_a_hub_model_name(hub, tmp_path, capsys, backend):
    from prl.cli.commands import cmd_rl

    toml = tiny_rl_toml(tmp_path, MODEL)
    assert cmd_rl(["@", str(toml), "--run.name", "hub", *backend]) == 0, capsys.readouterr().err[-3000:]
    out = capsys.readouterr().out
    assert "[trainer] Step 2 |" in out and f"fetching model {MODEL}" in out
    # Fetched once by prl rl itself; trainer and inference read that snapshot (no download).
    assert _weights(hub) == ["model.safetensors"]
    resolved = json.loads(
        (tmp_path / "outputs" / "hub" / "configs" / "latest" / "resolved" / "trainer.json").read_text()
    )
    assert resolved["model"]["name"] == MODEL
    if backend:
        return
    # A second run asks the hub for the repo's listing only, never for a file.
    hub.clear_log()
    assert cmd_rl(["@", str(toml), "--run.name", "hub-again", "--max-steps", "1"]) == 0
    assert hub.file_downloads() == []


def _prl(*argv: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "prl", *argv], capture_output=True, text=True, env=env or os.environ, timeout=timeout
    )


@pytest.mark.slow
def test_prl_fetch_then_an_offline_sft_from_a_hub_dataset(hub, tmp_path):
    argv = ["--model.name", MODEL, "--data.name", DATA, "--data.batch-size", "2", "--data.seq-len", "64"]
    fetched = _prl("fetch", "sft", *argv)
    assert fetched.returncode == 0, fetched.stderr[-2000:]
    assert f"dataset {DATA} (data.name): " in fetched.stdout
    hub.down()  # no network from here on
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    run = _prl("sft", *argv, "--max-steps", "2", "--output-dir", str(tmp_path), "--run.name", "s", env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    log = (tmp_path / "s" / "logs" / "attempt_1" / "trainer.log").read_text()
    assert "Step 2" in log or "step 2" in log, log[-2000:]


def _wait_healthy(url: str, server: subprocess.Popen, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.poll() is None, server.stdout.read()[-3000:] if server.stdout else ""
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"no server at {url} after {seconds} s")


@pytest.mark.slow
def test_prl_inference_and_prl_eval_from_a_hub_model_name(hub, tmp_path):
    from prl.serving import free_port

    port = free_port("127.0.0.1")
    server = subprocess.Popen(
        [sys.executable, "-m", "prl", "inference", "--model.name", MODEL, "--server.port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", server)
        url = f"http://127.0.0.1:{port}"
        run = _prl(
            "eval",
            "reverse-text",
            "-m",
            MODEL,
            "-n",
            "4",
            "-r",
            "1",
            "--client.base-url",
            url,
            "--output-dir",
            str(tmp_path),
            "--run.name",
            "e",
        )
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        assert list((tmp_path / "e").rglob("*.json")), "no eval results written"
    finally:
        server.terminate()
        server.wait(timeout=60)
    # Served and evaluated from one fetch of the weights; eval fetched no weights.
    assert _weights(hub) == ["model.safetensors"]
