"""The orchestrator honours an algorithm's frozen models: ``start`` runs before anything
else and its error ends the run, ``ref_logprobs`` fills the batch's reference stream, and a
``sampling_source`` other than the policy gets the source's rollouts."""

from __future__ import annotations

import asyncio
import time

import pytest

from prl.frozen import FrozenModelError
from prl.orchestrator.loop import Orchestrator
from prl.orchestrator.sources import resolve_source


class _Distill:
    """Wraps the stand-in baseline: ref_kl weight 1 on sampled tokens, reference −(token id)/1000."""

    def __init__(self, base, fail: Exception | None = None):
        self.base, self.fail = base, fail
        self.calls: list[str] = []
        self.tasks: list[str] = []

    def sampling_source(self):
        return "policy"

    async def start(self):
        self.calls.append("start")
        if self.fail is not None:
            raise self.fail

    def score_group(self, group):
        self.calls.append("score")
        for trace in group:
            for b in trace.branches:
                n = len(b.token_ids)
                b.advantages, b.rl_weights, b.ce_weights = [0.0] * n, [0.0] * n, [0.0] * n
                b.ref_kl_weights = [1.0 if s else 0.0 for s in b.sampled_mask]

    async def ref_logprobs(self, group, task, policy, renderer):
        assert self.calls[-1] == "score"  # after score_group, before the group is queued
        self.tasks.append(task.task_id)
        for trace in group:
            for b in trace.branches:
                b.ref_logprobs = [-t / 1000 for t in b.token_ids]

    async def close(self):
        self.calls.append("close")


class _NeverReady:
    base_url = "http://never"

    async def wait_ready(self, timeout):
        await asyncio.sleep(3600)


def _sources(config, run_dir, algorithm):
    from prl.envs.source import EnvSource

    return [resolve_source(config.train, s, EnvSource(s, "train", run_dir), algorithm) for s in config.train.source]


def test_ref_logprobs_reach_the_batch_and_the_algorithm_is_started_and_closed(make_config, tmp_path, kit):
    config = make_config(max_steps=2)
    algo = _Distill(None)
    weights = kit.MemoryWeights()
    trainer = kit.FakeTrainer(tmp_path, weights, config.max_steps)
    trainer.start()
    orch = Orchestrator(config, tmp_path, _sources(config, tmp_path, algo), kit.InstantClient(), None, weights)
    assert asyncio.run(asyncio.wait_for(orch.run(), 60)) == 0
    trainer.join(10)
    assert algo.calls[0] == "start" and algo.calls[-1] == "close" and algo.tasks
    for mb in (mb for ranks in trainer.batches.values() for r in ranks for mb in r):
        sampled = [w == 1.0 for w in mb["ref_kl_weights"]]
        assert any(sampled) and mb["loss_mask"] == sampled  # ref_kl alone makes samples useful
        ids, refs = mb["input_ids"], mb["ref_logprobs"]
        want = [-ids[i] / 1000 for i in range(len(ids)) if sampled[i]]
        assert [refs[i] for i in range(len(ids)) if sampled[i]] == pytest.approx(want, rel=1e-6)


def test_a_frozen_model_error_at_start_ends_the_run_before_waiting_for_inference(make_config, tmp_path, kit):
    config = make_config(max_steps=2)
    algo = _Distill(None, fail=FrozenModelError("orchestrator.train.algo.teacher: no server answers at http://x"))
    orch = Orchestrator(config, tmp_path, _sources(config, tmp_path, algo), _NeverReady(), None, kit.MemoryWeights())
    started = time.monotonic()
    with pytest.raises(FrozenModelError, match="teacher: no server answers"):
        asyncio.run(asyncio.wait_for(orch.run(), 30))
    assert time.monotonic() - started < 10 and algo.calls == ["start", "close"]


def test_a_frozen_sampling_source_runs_the_rollouts_instead_of_the_policy(make_config, tmp_path, kit):
    config = make_config(max_steps=1)
    weights = kit.MemoryWeights()
    trainer = kit.FakeTrainer(tmp_path, weights, config.max_steps)
    trainer.start()
    algo = _Distill(None)
    sources = _sources(config, tmp_path, algo)
    policy, frozen = kit.InstantClient(seed=1), kit.InstantClient(seed=2)
    calls = {"policy": 0, "frozen": 0}

    def counting(client, name):
        real = client.generate

        async def generate(prompt_ids, sampling):
            calls[name] += 1
            return await real(prompt_ids, sampling)

        client.generate = generate

    counting(policy, "policy")
    counting(frozen, "frozen")
    sources[0].client = frozen
    frozen.aclose = lambda: asyncio.sleep(0)
    orch = Orchestrator(config, tmp_path, sources, policy, None, weights)
    assert asyncio.run(asyncio.wait_for(orch.run(), 60)) == 0
    trainer.join(10)
    assert calls["policy"] == 0 and calls["frozen"] >= config.batch_size
