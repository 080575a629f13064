"""Curriculum admission gates (``sampler.min_mean_reward`` / ``max_mean_reward``): a group
outside the band is seen by the metrics but never reaches a batch."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from prl.config.components import SamplerConfig
from prl.orchestrator.loop import Orchestrator
from prl.orchestrator.sources import resolve_source


def test_gate_bounds_are_inclusive_and_ordered():
    gate = SamplerConfig(min_mean_reward=0.25, max_mean_reward=0.75)
    assert gate.admits([0.0, 0.5]) and gate.admits([0.5, 1.0]) and gate.admits([])
    assert not gate.admits([0.0, 0.0]) and not gate.admits([1.0, 1.0])
    assert SamplerConfig().admits([1.0, 1.0])
    with pytest.raises(ValidationError, match="min_mean_reward"):
        SamplerConfig(min_mean_reward=0.8, max_mean_reward=0.2)


def test_a_solved_source_is_kept_out_of_every_batch(make_config, tmp_path, kit):
    pytest.importorskip("prl_algo_debug")  # constant advantages: equal rewards still train
    from prl.envs.source import EnvSource

    debug = {"type": "debug"}
    sources = [
        {"name": "solved", "env": {"taskset": {"id": "orch-count", "reward": 1.0}}, "algo": debug,
         "sampler": {"max_mean_reward": 0.9}},
        {"name": "open", "env": {"taskset": {"id": "orch-count", "reward": 0.5}}, "algo": debug},
    ]  # fmt: skip
    config = make_config(sources=sources, max_steps=2)
    weights, monitor = kit.MemoryWeights(), kit.ListMonitor()
    trainer = kit.FakeTrainer(tmp_path, weights, config.max_steps)
    trainer.start()
    built = [resolve_source(config.train, s, EnvSource(s, "train", tmp_path)) for s in config.train.source]
    orch = Orchestrator(config, tmp_path, built, kit.InstantClient(), None, weights, monitors=[monitor])
    assert asyncio.run(asyncio.wait_for(orch.run(), 60)) == 0
    trainer.join(10)
    envs = {e for ranks in trainer.batches.values() for r in ranks for mb in r for e in mb["env_names"] if e}
    assert envs == {"open"}
    rows = [row for step, row in monitor.rows if step is not None]  # not the time-keyed rows
    assert sum(r["curriculum/solved/rejected_groups"] for r in rows) > 0
    assert all(r["curriculum/open/rejected_groups"] == 0 for r in rows)
    assert any(r.get("reward/solved/mean") == 1.0 for r in rows)  # rejected groups are still measured
