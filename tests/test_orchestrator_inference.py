"""The orchestrator against a real inference server (torch backend, tiny local model), the
real reverse-text taskset and the filesystem weight transport; the trainer is a thread
that reads each batch and re-publishes the model's weights as the next version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_weights_filesystem")
pytest.importorskip("prl_tasks_builtin")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from prl_model_init.build import make_model

    root = tmp_path_factory.mktemp("orch-inference")
    model = make_model(root / "model", preset="tiny")
    ready = root / "ready"
    log = open(root / "inference.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "prl", "inference", "--model.name", str(model), "--server.port", "0"],
        env={**os.environ, "PRL_READY_FILE": str(ready)}, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, (root / "inference.log").read_text()[-2000:]
        time.sleep(0.2)
    yield model, ready.read_text().strip()
    proc.terminate()
    proc.wait(30)
    log.close()


@pytest.mark.slow
def test_orchestrator_with_real_inference_and_weights(server, tmp_path, capsys):
    from prl_weights_filesystem import FilesystemWeights
    from safetensors.torch import load_file

    from prl.config.components import OrchestratorConfig
    from prl.orchestrator.run import run_orchestrator
    from prl.orchestrator.transport import read_batch

    model, url = server
    config = OrchestratorConfig.model_validate({
        "model": {"name": str(model)}, "client": {"base_url": url}, "batch_size": 4, "seq_len": 256, "max_steps": 2,
        "output_dir": str(tmp_path), "run": {"name": "run"}, "weight_broadcast": {"timeout": 120},
        "train": {"group_size": 2, "sampling": {"max_completion_tokens": 8},
                  "source": [{"name": "reverse-text", "env": {"taskset": {"id": "reverse-text"}}}]},
    })  # fmt: skip
    run_dir = tmp_path / "run"
    state = load_file(str(model / "model.safetensors"))
    got, errors = {}, []

    def trainer():
        try:
            transport = FilesystemWeights(config.weight_broadcast, run_dir)
            transport.publish(state, 0)
            for step in (1, 2):
                got[step] = read_batch(run_dir, step, 0, timeout=120)
                transport.publish(state, step)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=trainer, daemon=True)
    thread.start()
    assert run_orchestrator(config, run_dir) == 0
    thread.join(30)
    assert not errors, errors
    for _step, mbs in got.items():
        docs = [(n, e) for mb in mbs for n, e in zip(mb["seq_lens"], mb["env_names"], strict=False) if e]
        assert len(docs) <= 4 and all(e == "reverse-text" for _, e in docs)
        for mb in mbs:
            assert any(mb["loss_mask"]) or not any(mb["env_names"])
            assert all(lp <= 0 for lp, m in zip(mb["inference_logprobs"], mb["loss_mask"], strict=False) if m)
    rows = [json.loads(line) for line in (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    orch = [r for r in rows if r.get("producer") == "orch" and r.get("step")]
    assert [r["step"] for r in orch] == [1, 2] and "reward/all/mean" in orch[0]
    assert sorted(p.name for p in (run_dir / "broadcasts").iterdir()) == ["step_1", "step_2"]
    assert "Step 2 |" in capsys.readouterr().out
