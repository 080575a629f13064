"""``prl rl`` on a tiny model with truncated sampling (top_p = 0.9, torch backend): the
sampling masks travel from the inference server through the orchestrator to the trainer,
which replays them (IPO with score centering) under full optimizer offload."""

from __future__ import annotations

import json

import pytest

from prl.testing.configs import tiny_rl_toml

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_launcher_local")
pytest.importorskip("prl_tasks_builtin")


def _config(tmp_path):
    from prl_model_init.build import make_model

    model = make_model(tmp_path / "model", preset="tiny")
    orchestrator = {"train": {"sampling": {"top_p": 0.9}}}
    trainer = {"model": {"full_offload": True}, "loss": {"type": "ipo", "score_centering": True}}
    return tiny_rl_toml(tmp_path, model, {"orchestrator": orchestrator, "trainer": trainer})


@pytest.mark.slow
def test_truncated_sampling_is_replayed_end_to_end(tmp_path, capsys):
    from prl.cli.commands import cmd_rl

    code = cmd_rl(["@", str(_config(tmp_path)), "--run.name", "replay"])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    run_dir = tmp_path / "outputs" / "replay"
    rows = [json.loads(x) for x in (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    trainer = {r["step"]: r for r in rows if r.get("producer") == "trainer" and "loss/all" in r}
    assert sorted(trainer) == [1, 2]
    for r in trainer.values():
        assert 0.0 <= r["mismatch/sampling_mask"] <= 1.0
        assert r["optim/grad_norm"] > 0  # measured by the offloaded optimizer during the backward
    log = (run_dir / "logs" / "attempt_1" / "trainer.log").read_text()
    assert log.count("gradient clipping is off") == 1
