"""The orchestrator loop end to end with in-process stand-ins (real EnvSource, real packing
and filesystem transport; instant inference; a fake trainer thread)."""

from __future__ import annotations

import asyncio

from prl import layout
from prl.orchestrator.loop import Orchestrator
from prl.orchestrator.sources import resolve_source


def _orchestrator(config, run_dir, kit, client=None, weights=None, monitor=None):
    from prl.envs.source import EnvSource

    sources = [resolve_source(config.train, s, EnvSource(s, "train", run_dir)) for s in config.train.source]
    return Orchestrator(
        config, run_dir, sources, client or kit.InstantClient(), None, weights or kit.MemoryWeights(),
        monitors=[monitor] if monitor else [],
    )  # fmt: skip


def _run(config, run_dir, kit, ranks=1, step_time=0.0, start=1, **kw):
    weights = kw.pop("weights", None) or kit.MemoryWeights()
    trainer = kit.FakeTrainer(run_dir, weights, config.max_steps, ranks=ranks, start=start, step_time=step_time)
    trainer.start()
    orch = _orchestrator(config, run_dir, kit, weights=weights, **kw)
    code = asyncio.run(asyncio.wait_for(orch.run(), 60))
    trainer.join(10)
    assert trainer.error is None, trainer.error
    return code, orch, trainer


def test_ships_every_step_with_all_fields(make_config, tmp_path, kit, capsys):
    config = make_config(max_steps=3, num_train_workers=2)
    monitor = kit.ListMonitor()
    code, orch, trainer = _run(config, tmp_path, kit, ranks=2, monitor=monitor)
    assert code == 0 and sorted(trainer.batches) == [1, 2, 3]
    for _step, ranks in trainer.batches.items():
        assert len(ranks[0]) == len(ranks[1])  # lockstep ranks
        docs = [d for r in ranks for mb in r for d in mb["trace_ids"] if d]
        assert len(set(docs)) == 8  # batch_size traces, each once
        for mb in ranks[0]:
            n = len(mb["input_ids"])
            for key in ("position_ids", "loss_mask", "advantages", "inference_logprobs", "temperatures",
                        "rl_weights", "ce_weights", "ref_kl_weights"):  # fmt: skip
                assert len(mb[key]) == n, key
            assert sum(mb["seq_lens"]) == n and len(mb["env_names"]) == len(mb["seq_lens"])
    # One metrics row per step, with the headline numbers.
    stepped = [(s, r) for s, r in monitor.rows if s is not None]  # step None: time-keyed rows
    assert [s for s, _ in stepped] == [1, 2, 3]
    row = stepped[-1][1]
    for key in ("reward/all/mean", "reward/count/mean", "seq_len/all/mean", "errored/all/mean",
                "off_policy/mean_steps", "time/wait_for_policy", "progress/total_samples",
                "is_truncated/all/mean", "empty/all/mean"):  # fmt: skip
        assert key in row, key
    assert monitor.closed and monitor.traces and monitor.traces[0]["kind"] == "train"
    out = capsys.readouterr().out
    assert "Step 1 |" in out and "| Reward " in out and "Step 3 |" in out


def test_never_ships_more_than_two_ahead_of_the_policy(make_config, tmp_path, kit, monkeypatch):
    config = make_config(max_steps=5)
    weights = kit.MemoryWeights()
    shipped_at: dict[int, int] = {}
    orch_holder = {}

    import prl.orchestrator.loop as loop_mod

    real_open = loop_mod.open_sender

    def spy_open(cfg, run_dir):
        sender = real_open(cfg, run_dir)
        real_send = sender.send

        def send(step, ranks):
            shipped_at[step] = orch_holder["o"].follower.version
            return real_send(step, ranks)

        sender.send = send
        return sender

    monkeypatch.setattr(loop_mod, "open_sender", spy_open)
    trainer = kit.FakeTrainer(tmp_path, weights, 5, step_time=0.05)
    trainer.start()
    orch = _orchestrator(config, tmp_path, kit, weights=weights)
    orch_holder["o"] = orch
    asyncio.run(asyncio.wait_for(orch.run(), 60))
    trainer.join(10)
    assert sorted(shipped_at) == [1, 2, 3, 4, 5]
    for step, version in shipped_at.items():
        assert version >= step - 2, (step, version)
    # Every published version was acknowledged, in order, and loaded around a pause.
    assert weights.acked == [0, 1, 2, 3, 4, 5]
    updates = [c for c in orch.client.calls if c[0] == "update_weights"]
    assert updates[0] == ("update_weights", "/weights/step_1") and len(updates) == 5
    assert orch.client.calls[:3] == [("pause",), ("update_weights", "/weights/step_1"), ("resume",)]


def test_stale_groups_are_dropped_and_counted(make_config, tmp_path, kit):
    config = make_config(max_steps=2, max_off_policy_steps=0)
    orch = _orchestrator(config, tmp_path, kit)
    from prl.orchestrator.buffer import FinishedGroup
    from prl.orchestrator.samples import TraceSamples

    orch.step = 3  # batch 3 trains at version 2: a group dispatched at version 1 is too old
    orch.buffer.add(FinishedGroup(1, [TraceSamples(None, samples=[object()])] * 4))
    orch.buffer.add(FinishedGroup(2, [TraceSamples(None, samples=[object()])] * 4))
    assert not orch.buffer.ready(3)
    counters = orch.buffer.pop_counters()
    assert counters["off_policy/dropped_groups"] == 1 and counters["off_policy/dropped_traces"] == 4
    assert orch.buffer.count == 4


def test_errored_rollouts_are_counted_not_trained(make_config, tmp_path, kit):
    sources = [{"name": "flaky", "env": {"taskset": {"id": "orch-count", "fail_every": 3}}}]
    config = make_config(sources=sources, max_steps=2)
    monitor = kit.ListMonitor()
    code, _, trainer = _run(config, tmp_path, kit, monitor=monitor)
    assert code == 0
    errored = sum(row["errored/all/mean"] * row["rollouts/all/count"] for s, row in monitor.rows if s is not None)
    assert errored >= 1
    for ranks in trainer.batches.values():
        assert len({d for mb in ranks[0] for d in mb["trace_ids"] if d}) == 8


def test_two_sources_inherit_and_override(make_config, tmp_path, kit):
    sources = [
        {"name": "a", "env": {"taskset": {"id": "orch-count"}}, "ratio": 3.0},
        {"name": "b", "env": {"taskset": {"id": "orch-count", "completion": 3}}, "group_size": 2,
         "sampling": {"temperature": 0.5}},
    ]  # fmt: skip
    config = make_config(sources=sources, max_steps=3, train__sampling={"temperature": 0.9, "top_p": 0.8})
    code, orch, trainer = _run(config, tmp_path, kit)
    a, b = orch.sources
    assert (a.group_size, b.group_size) == (4, 2)
    assert (a.sampling.temperature, b.sampling.temperature) == (0.9, 0.5) and b.sampling.top_p == 0.8
    temps = {round(t, 4) for ranks in trainer.batches.values() for mb in ranks[0] for t in mb["temperatures"]}
    assert temps <= {0.9, 0.5} and 0.9 in temps


def test_resume_restores_counters_and_starts_after_the_checkpoint(make_config, tmp_path, kit):
    config = make_config(max_steps=2, ckpt={"interval": 1})
    _run(config, tmp_path, kit)
    state = tmp_path / "checkpoints" / "step_2" / "orchestrator" / "progress.pt"
    assert state.exists() and (tmp_path / "checkpoints" / "step_1" / "orchestrator" / "progress.pt").exists()
    layout.mark_complete(state.parent.parent, layout.TRAINER)  # what the trainer does after its save
    resumed = make_config(max_steps=3, ckpt={"interval": 1}, resume={})
    _, orch, trainer = _run(resumed, tmp_path, kit, start=3)
    assert sorted(trainer.batches) == [3]
    assert orch.progress["total_samples"] == 24  # 2 restored steps + 1 new, 8 samples each
    # Inference was restarted from the base model: the re-broadcast version 2 is loaded.
    assert ("update_weights", "/weights/step_2") in orch.client.calls


def test_state_round_trip_continues_source_mixing_and_sampling(make_config, tmp_path, kit):
    import json

    sources = [
        {"name": "a", "env": {"taskset": {"id": "orch-count"}}},
        {"name": "b", "env": {"taskset": {"id": "orch-count"}}, "sampler": {"type": "difficulty_pool"}},
    ]
    config = make_config(sources=sources)

    def draws(orch, n=30):
        out = []
        for _ in range(n):
            src = orch.mixer.pick()
            task = src.sampler.next()
            src.sampler.observe(task.task_id, [1.0, 1.0] if task.task_id < "t5" else [0.0, 1.0])
            out.append((src.name, task.task_id))
        return out

    a = _orchestrator(config, tmp_path, kit)
    b = _orchestrator(config, tmp_path, kit)
    for o in (a, b):
        for s in o.sources:
            s.make_sampler()
    draws(a, 17)
    state = json.loads(json.dumps(a.state_dict()))
    b.load_state_dict(state)
    assert draws(b) == draws(a)


class _DeadEnv:
    """Wraps a real EnvSource and reports its env server as dead."""

    def __init__(self, inner, source):
        self.inner, self.source = inner, source

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def check_alive(self):
        from prl.envs.source import EnvServerDied

        raise EnvServerDied(self.source, "exited with code 1")


def _with_dead_source(config, run_dir, kit, dead: str):
    orch = _orchestrator(config, run_dir, kit)
    for s in orch.sources:
        if s.name == dead:
            s.env = _DeadEnv(s.env, s.name)
    return orch


def test_dead_env_server_stops_the_run_when_on_failure_is_stop(make_config, tmp_path, kit):
    import pytest

    from prl.envs.source import EnvServerDied

    sources = [{"name": "a", "env": {"taskset": {"id": "orch-count", "delay": 0.05}, "on_failure": "stop"}},
               {"name": "b", "env": {"taskset": {"id": "orch-count"}}}]  # fmt: skip
    config = make_config(sources=sources, max_steps=2, batch_size=400)
    orch = _with_dead_source(config, tmp_path, kit, "a")
    orch.weights.publish({}, 0)
    with pytest.raises(EnvServerDied, match="env server of source 'a' died: exited with code 1"):
        asyncio.run(asyncio.wait_for(orch.run(), 30))


def test_dead_env_server_is_dropped_when_on_failure_is_continue(make_config, tmp_path, kit):
    sources = [{"name": "a", "env": {"taskset": {"id": "orch-count", "delay": 0.05}}},
               {"name": "b", "env": {"taskset": {"id": "orch-count"}}}]  # fmt: skip
    config = make_config(sources=sources, max_steps=2, batch_size=400)
    weights = kit.MemoryWeights()
    trainer = kit.FakeTrainer(tmp_path, weights, 2)
    trainer.start()
    orch = _with_dead_source(config, tmp_path, kit, "a")
    orch.weights = weights
    assert asyncio.run(asyncio.wait_for(orch.run(), 60)) == 0
    assert [s.name for s in orch.mixer.sources] == ["b"]


def test_waiting_for_weights_names_the_version(make_config, tmp_path, kit):
    import pytest

    from prl.orchestrator.weights import WeightFollower

    async def go():
        follower = WeightFollower(kit.MemoryWeights(), kit.InstantClient(), 0, None, poll=0.05)
        follower.start()
        try:
            await follower.wait_for(3, timeout=0.3)
        finally:
            await follower.stop()

    with pytest.raises(TimeoutError, match=r"weights version 3 \(broadcasts/step_3\); inference serves version None"):
        asyncio.run(go())


def test_watchdog_names_a_batch_starved_by_filtered_groups(make_config, tmp_path, kit, caplog):
    """Groups keep finishing, but every trace has the same reward: none counts toward the
    batch. The watchdog must still speak (it measures time without a step, not silence)
    and say why the batch does not fill."""
    import logging

    import pytest

    sources = [{"name": "flat", "env": {"taskset": {"id": "orch-count", "reward": 0.0, "delay": 0.02}}}]
    config = make_config(sources=sources, max_steps=1, watchdog={"min_stall_s": 0.5, "first_step_s": 0.5})
    client = kit.InstantClient()
    client.base_url = None  # the stand-in has no server to probe
    orch = _orchestrator(config, tmp_path, kit, client=client)
    with caplog.at_level(logging.WARNING, logger="prl.orchestrator"), pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(orch.run(), 2.5))
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("watchdog: no step")]
    assert len(said) == 1, "the watchdog never reported the stalled batch, or repeated itself"
    assert "waiting for the orchestrator collecting batch 1 (pid " in said[0]
    assert "0/8 traces ready" in said[0] and "finished traces were filtered out" in said[0]
    assert "constant_trainer_batch_size" in said[0]


def test_online_eval_runs_at_interval_versions(make_config, tmp_path, kit, capsys):
    from prl.envs.source import EnvSource
    from prl.orchestrator.evals import OnlineEval

    config = make_config(
        max_steps=4,
        eval={"interval": 2, "group_size": 3, "num_examples": 4, "sampling": {"temperature": 0.5},
              "source": [{"name": "held-out", "env": {"taskset": {"id": "orch-count", "completion": 2}}}]},
    )  # fmt: skip
    monitor = kit.ListMonitor()
    envs = {s.name: EnvSource(s, "eval", tmp_path) for s in config.eval.source}
    client = kit.InstantClient()
    evaluator = OnlineEval(config.eval, envs, client, None, [monitor], max_inflight=4)
    weights = kit.MemoryWeights()
    trainer = kit.FakeTrainer(tmp_path, weights, 4)
    trainer.start()
    orch = _orchestrator(config, tmp_path, kit, client=client, weights=weights, monitor=monitor)
    orch.evaluator = evaluator
    assert asyncio.run(asyncio.wait_for(orch.run(), 60)) == 0
    evals = [(step, row) for step, row in monitor.rows if "eval/held-out/avg@3" in row]
    assert [step for step, _ in evals] == [2, 4]
    assert evals[0][1]["eval/held-out/num_examples"] == 4 and evals[0][1]["eval/held-out/num_rollouts"] == 12
    assert "Eval step 4 | held-out avg@3" in capsys.readouterr().out


def test_online_eval_leaves_failed_rollouts_out_of_the_mean(make_config, tmp_path, kit, capsys):
    from prl.envs.source import EnvSource
    from prl.orchestrator.evals import OnlineEval

    taskset = {"id": "orch-count", "reward": 1.0, "fail_every": 4}  # 3 of 12 rollouts raise
    config = make_config(
        eval={"group_size": 3, "num_examples": 4, "source": [{"name": "ho", "env": {"taskset": taskset}}]}
    )
    monitor = kit.ListMonitor()
    envs = {s.name: EnvSource(s, "eval", tmp_path) for s in config.eval.source}
    evaluator = OnlineEval(config.eval, envs, kit.InstantClient(), None, [monitor], max_inflight=1)

    async def run():
        await evaluator.start()
        try:
            return await evaluator.run(2)
        finally:
            await evaluator.close()

    metrics = asyncio.run(run())
    # every rollout that finished earned 1.0: failures are counted, not averaged in as 0
    assert metrics["eval/ho/avg@3"] == 1.0 and metrics["eval/ho/num_failed"] == 3
    assert "ho: 3 of 12 rollouts failed: RuntimeError: env exploded" in capsys.readouterr().out


def test_weight_update_cancels_groups_already_too_stale(make_config, tmp_path, kit):
    config = make_config(max_off_policy_steps=1)
    orch = _orchestrator(config, tmp_path, kit)

    async def go():
        old = asyncio.create_task(asyncio.sleep(10))
        fresh = asyncio.create_task(asyncio.sleep(10))
        orch.inflight = {old: 0, fresh: 1}
        orch.step = 3  # batch 3 trains at version 2; with 1 step allowed, version 0 is stale
        orch._on_version(2)
        await asyncio.sleep(0)
        result = (old.cancelled(), fresh.cancelled(), orch.cancelled_groups)
        fresh.cancel()
        return result

    assert asyncio.run(go()) == (True, False, 1)
