"""``prl rl`` on a tiny model with truncated sampling (top_p = 0.9, torch backend): the
sampling masks travel from the inference server through the orchestrator to the trainer,
which replays them (IPO with score centering) under full optimizer offload."""

from __future__ import annotations

import json
import textwrap

import pytest

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_launcher_local")
pytest.importorskip("prl_tasks_builtin")


def _config(tmp_path):
    from prl_model_init.build import make_model

    model = make_model(tmp_path / "model", preset="tiny")
    toml = tmp_path / "rl.toml"
    toml.write_text(
        textwrap.dedent(f'''
        max_steps = 2
        seq_len = 256
        output_dir = "{tmp_path / "outputs"}"
        env_vars = {{ OMP_NUM_THREADS = "1" }}
        [model]
        name = "{model}"
        [orchestrator]
        batch_size = 4
        [orchestrator.train]
        group_size = 2
        [orchestrator.train.sampling]
        max_completion_tokens = 8
        top_p = 0.9
        [trainer.optim]
        lr = 1e-3
        [trainer.model]
        full_offload = true
        [trainer.loss]
        type = "ipo"
        score_centering = true
        [[orchestrator.train.source]]
        name = "reverse-text"
        env.taskset.id = "reverse-text"
        [inference.server]
        port = 0
    ''')
    )
    return toml


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
