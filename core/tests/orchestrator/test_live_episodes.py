"""In-flight episodes reach the monitors (prl.live): the orchestrator reports each episode's
dispatch, start and end under the trace id its finished trace carries, and a
``Conversation`` reports each model turn of the episode it runs in."""

from __future__ import annotations

import asyncio

from prl.live import LiveEpisodes
from prl.orchestrator.loop import Orchestrator
from prl.orchestrator.sources import resolve_source
from prl.tasks import Conversation
from prl.types import Sampling


def _recorder(kit):
    class LiveMonitor(kit.ListMonitor):
        def __init__(self):
            super().__init__()
            self.live: list[tuple[str, dict]] = []
            self.cleared_before: int | None = None

        def log_live(self, trace_id, event):
            self.live.append((trace_id, event))

        def clear_live(self):
            self.cleared_before = len(self.live)

    return LiveMonitor()


def test_every_episode_is_dispatched_started_and_ended_under_its_trace_id(make_config, tmp_path, kit):
    from prl.envs.source import EnvSource

    config = make_config(max_steps=2)
    monitor = _recorder(kit)
    weights = kit.MemoryWeights()
    trainer = kit.FakeTrainer(tmp_path, weights, config.max_steps)
    trainer.start()
    sources = [resolve_source(config.train, s, EnvSource(s, "train", tmp_path)) for s in config.train.source]
    orch = Orchestrator(config, tmp_path, sources, kit.InstantClient(), None, weights, monitors=[monitor])
    assert asyncio.run(asyncio.wait_for(orch.run(), 60)) == 0
    trainer.join(10)

    assert monitor.cleared_before == 0  # orphans cleared before the first dispatch
    events: dict[str, list[dict]] = {}
    for trace_id, event in monitor.live:
        events.setdefault(trace_id, []).append(event)
    finished = {t["id"] for t in monitor.traces}
    assert finished and finished <= set(events)  # each logged trace was live under its own id
    for trace_id in finished:
        kinds = [e["event"] for e in events[trace_id]]
        assert kinds == ["dispatch", "start", "end"], kinds
        dispatch = events[trace_id][0]
        assert dispatch["env"] == "count" and dispatch["kind"] == "train" and dispatch["task_id"].startswith("t")
        assert events[trace_id][1]["prompt"][0]["role"] == "user"
    # Episodes cancelled at shutdown end too: nothing is left looking in flight.
    assert all(evs[-1]["event"] == "end" for evs in events.values())


def test_conversation_turns_are_reported_to_the_episode_they_run_in(standins, kit):
    renderer = standins().prl_register_renderers()[0](None, None)
    monitor = _recorder(kit)
    episodes = LiveEpisodes([monitor])

    async def episode():
        conv = Conversation(renderer, [{"role": "user", "content": "hi"}], agent="solver")
        with episodes.running("t1", conv.messages):
            first = await conv.sample(kit.InstantClient(), Sampling(max_tokens=3))
            conv.add({"role": "user", "content": "again"})
            await conv.sample(kit.InstantClient(seed=1), Sampling(max_tokens=2))
        return first

    first = asyncio.run(episode())
    turns = [e for _, e in monitor.live if e["event"] == "turn"]
    assert [(t["turn"], t["tokens"], t["agent"]) for t in turns] == [(1, 3, "solver"), (2, 2, "solver")]
    assert turns[0]["text"] == first and turns[0]["finish_reason"] == "length"
    assert [e["event"] for _, e in monitor.live] == ["start", "turn", "turn", "end"]


def test_online_eval_episodes_are_live_as_eval_under_their_trace_ids(make_config, tmp_path, kit):
    from prl.envs.source import EnvSource
    from prl.orchestrator.evals import OnlineEval

    config = make_config(
        eval={"interval": 1, "group_size": 2, "num_examples": 3,
              "source": [{"name": "held-out", "env": {"taskset": {"id": "orch-count", "completion": 2}}}]},
    )  # fmt: skip
    monitor = _recorder(kit)
    envs = {s.name: EnvSource(s, "eval", tmp_path) for s in config.eval.source}
    evaluator = OnlineEval(config.eval, envs, kit.InstantClient(), None, [monitor], max_inflight=2)
    asyncio.run(evaluator.run(5))
    by_id: dict[str, list[dict]] = {}
    for trace_id, event in monitor.live:
        by_id.setdefault(trace_id, []).append(event)
    assert {t["trace_id"] for t in monitor.traces} == set(by_id) and len(by_id) == 6
    for events in by_id.values():
        assert [e["event"] for e in events] == ["dispatch", "start", "end"]
        assert events[0]["kind"] == "eval" and events[0]["version"] == 5 and events[0]["env"] == "held-out"
