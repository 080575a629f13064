"""A ``prl rl`` run mixing two tasksets with different algorithms (``[[orchestrator.train.
source]]`` ``algo``) and a ``ratio``: both sources are sampled and trained, each scored by
its own algorithm, with per-env metrics from orchestrator and trainer."""

from __future__ import annotations

import json

import pytest

from prl.testing.configs import tiny_rl_toml

for _dist in ("prl_model_init", "prl_inference_torch", "prl_launcher_local", "prl_tasks_builtin", "prl_trainer_torch"):
    pytest.importorskip(_dist)
pytest.importorskip("prl_algo_debug")


@pytest.mark.slow
def test_two_sources_with_their_own_algorithms_both_train(tmp_path, capsys):
    from prl_model_init.build import make_model

    from prl.cli.commands import cmd_rl

    model = make_model(tmp_path / "model", preset="tiny")
    sources = [
        {"name": "reverse", "ratio": 2.0, "env": {"taskset": {"id": "reverse-text"}}},
        {"name": "kuhn", "ratio": 1.0, "env": {"taskset": {"id": "kuhn-poker"}}, "algo": {"type": "debug"}},
    ]
    train = {"sampling": {"max_completion_tokens": 6}, "source": sources}
    orchestrator = {"batch_size": 8, "deterministic": True, "train": train}
    toml = tiny_rl_toml(tmp_path, model, {"max_steps": 3, "seq_len": 512, "orchestrator": orchestrator})
    code = cmd_rl(["@", str(toml), "--run.name", "mix"])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "outputs" / "mix" / "monitors" / "file" / "metrics.jsonl").open()]
    orch = [r for r in rows if r.get("producer") == "orch" and r.get("step")]
    trainer = [r for r in rows if r.get("producer") == "trainer" and "loss/all" in r]
    assert [r["step"] for r in orch] == [1, 2, 3] and len(trainer) == 3
    episodes = {env: sum(r.get(f"rollouts/{env}/count", 0) for r in orch) for env in ("reverse", "kuhn")}
    assert episodes["reverse"] > 0 and episodes["kuhn"] > 0, episodes
    assert episodes["reverse"] > episodes["kuhn"], f"ratio 2:1 not followed: {episodes}"
    assert any("agent_reward/kuhn/player2/mean" in r for r in orch)
    # A random model never makes a legal poker move, so every hand pays the same: the group's
    # grpo would give kuhn all-zero advantages and train none of it. debug's constant
    # advantage does train it, so kuhn samples reach the trainer: its per-env entropy shows.
    assert any("entropy/kuhn/mean" in r for r in trainer), "kuhn was never trained: its algo (debug) was not used"
    assert any("entropy/reverse/mean" in r for r in trainer)
