"""In-flight episodes under ``monitors/file/live/`` (``docs/monitoring.md``): the lifecycle
the dashboard reads, orphan clearing, and that a failing write never reaches the episode."""

import asyncio
import json
import logging

import pytest
from prl_monitor_file import FileMonitor

from prl.live import LiveEpisodes, report_turn

INFO = {"env": "reverse-text", "task_id": "t-7", "group": "d3", "kind": "train", "version": 2}
PROMPT = [{"role": "user", "content": "reverse: abc"}]


def _monitor(run_dir, producer="orch"):
    return FileMonitor(FileMonitor.Config(), run_dir, producer, "run")


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_an_episode_is_pending_then_running_with_its_turns_then_gone(tmp_path):
    monitor = _monitor(tmp_path)
    live_dir = tmp_path / "monitors" / "file" / "live"
    episodes = LiveEpisodes([monitor])
    episodes.dispatch("abc123", INFO)
    pending = json.loads((live_dir / "pending" / "abc123.json").read_text())
    assert pending["trace_id"] == "abc123" and pending["task_id"] == "t-7" and pending["version"] == 2
    assert isinstance(pending["dispatch"], float)
    assert not (live_dir / "abc123.jsonl").exists()

    with episodes.running("abc123", PROMPT):
        assert not (live_dir / "pending" / "abc123.json").exists()  # started: no longer pending
        report_turn({"agent": "default", "turn": 1, "text": "cb", "tokens": 3, "finish_reason": "stop"})
        report_turn({"agent": "default", "turn": 2, "text": "cba", "tokens": 4, "finish_reason": "stop"})
        events = _lines(live_dir / "abc123.jsonl")
        assert [e["event"] for e in events] == ["start", "turn", "turn"]
        assert events[0]["prompt"] == PROMPT and events[0]["env"] == "reverse-text"
        assert events[0]["dispatch"] == pending["dispatch"]
        assert [e["text"] for e in events[1:]] == ["cb", "cba"]
    assert list(live_dir.rglob("*.json*")) == []
    report_turn({"text": "after the episode"})  # outside an episode: ignored
    assert list(live_dir.rglob("*.json*")) == []
    monitor.close()


def test_concurrent_episodes_keep_their_own_turns(tmp_path):
    monitor = _monitor(tmp_path)
    episodes = LiveEpisodes([monitor])
    seen = {}

    async def one(trace_id, text):
        episodes.dispatch(trace_id, INFO)
        with episodes.running(trace_id, PROMPT):
            await asyncio.sleep(0)
            report_turn({"turn": 1, "text": text})
            await asyncio.sleep(0)
            seen[trace_id] = _lines(tmp_path / "monitors" / "file" / "live" / f"{trace_id}.jsonl")

    async def both():
        await asyncio.gather(one("a1", "from a"), one("b2", "from b"))

    asyncio.run(both())
    assert [e.get("text") for e in seen["a1"]] == [None, "from a"]
    assert [e.get("text") for e in seen["b2"]] == [None, "from b"]
    monitor.close()


def test_a_cancelled_rollout_removes_its_live_file(tmp_path):
    monitor = _monitor(tmp_path)
    episodes = LiveEpisodes([monitor])

    async def rollout():
        episodes.dispatch("c3", INFO)
        with episodes.running("c3", PROMPT):
            await asyncio.sleep(30)

    async def cancel_it():
        task = asyncio.create_task(rollout())
        await asyncio.sleep(0.01)
        assert (tmp_path / "monitors" / "file" / "live" / "c3.jsonl").exists()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(cancel_it())
    assert list((tmp_path / "monitors" / "file" / "live").rglob("*.json*")) == []
    monitor.close()


def test_orphans_of_a_killed_run_are_cleared_and_other_producers_leave_them(tmp_path):
    live_dir = tmp_path / "monitors" / "file" / "live"
    (live_dir / "pending").mkdir(parents=True)
    (live_dir / "pending" / "old1.json").write_text("{}")
    (live_dir / "old2.jsonl").write_text('{"event":"start"}\n')
    trainer = _monitor(tmp_path, "trainer")  # opening a monitor clears nothing
    assert (live_dir / "old2.jsonl").exists()
    orch = _monitor(tmp_path)
    LiveEpisodes([orch]).clear()
    assert not live_dir.exists() or list(live_dir.rglob("*.json*")) == []
    LiveEpisodes([orch]).clear()  # nothing left to clear: still fine
    for m in (trainer, orch):
        m.close()


def test_a_write_error_is_logged_once_and_never_raises(tmp_path, caplog):
    monitor = _monitor(tmp_path)
    live_dir = tmp_path / "monitors" / "file" / "live"
    live_dir.parent.mkdir(parents=True, exist_ok=True)
    live_dir.write_text("a file where the live directory should be")
    episodes = LiveEpisodes([monitor])
    with caplog.at_level(logging.WARNING):
        for trace_id in ("x1", "x2"):
            episodes.dispatch(trace_id, INFO)
            with episodes.running(trace_id, PROMPT):
                report_turn({"turn": 1, "text": "ok"})
    warnings = [r for r in caplog.records if "live episode" in r.getMessage()]
    assert len(warnings) == 1 and str(live_dir) in warnings[0].getMessage()
    monitor.close()


def test_a_monitor_that_raises_is_skipped_and_the_others_still_get_events(tmp_path, caplog):
    class Broken:
        def log_live(self, trace_id, event):
            raise RuntimeError("boom")

        def clear_live(self):
            raise RuntimeError("boom")

    monitor = _monitor(tmp_path)
    episodes = LiveEpisodes([Broken(), monitor])
    with caplog.at_level(logging.WARNING):
        episodes.clear()
        episodes.dispatch("y1", INFO)
        assert (tmp_path / "monitors" / "file" / "live" / "pending" / "y1.json").exists()
    assert sum("Broken" in r.getMessage() for r in caplog.records) == 1
    monitor.close()


def test_prl_eval_writes_live_files_while_sampling_and_none_after(tmp_path, monkeypatch):
    """A real ``prl eval`` of reverse-text (a Conversation taskset) with a scripted policy:
    while the policy answers, its episode is running in live/; every turn is recorded; at
    the end live/ is empty and the finished traces carry the ids that were live."""
    pytest.importorskip("prl_tasks_builtin")
    from prl_monitor_file import live as live_mod

    import prl.orchestrator.run
    from prl.config.roots import EvalConfig
    from prl.eval import run_eval
    from prl.tasks.testing import ByteRenderer, ScriptedClient, last_user

    run_dir = tmp_path / "ev"
    live_dir = run_dir / "monitors" / "file" / "live"
    (live_dir / "pending").mkdir(parents=True)
    (live_dir / "pending" / "orphan.json").write_text("{}")  # from a killed attempt
    seen_running: list[set[str]] = []

    def answer(messages):
        seen_running.append({p.stem for p in live_dir.glob("*.jsonl")})
        return last_user(messages)[::-1]

    events: list[tuple[str, dict]] = []
    real_append = live_mod.LiveWriter._append
    monkeypatch.setattr(
        live_mod.LiveWriter, "_append", lambda self, t, e: (events.append((t, e)), real_append(self, t, e))
    )
    monkeypatch.setattr(prl.orchestrator.run, "build_client", lambda cfg: ScriptedClient(answer))
    monkeypatch.setattr(prl.orchestrator.run, "build_renderer", lambda cfg: ByteRenderer())
    config = EvalConfig.model_validate({
        "output_dir": str(tmp_path), "run": {"name": "ev"}, "group_size": 2,
        "source": [{"name": "rt", "env": {"taskset": {"id": "reverse-text", "num_eval": 3}}}],
    })  # fmt: skip
    assert run_eval(config, run_dir) == 0
    assert len(seen_running) == 6 and all(seen_running)  # each answer was given while live
    assert not (live_dir / "pending" / "orphan.json").exists()
    assert list(live_dir.rglob("*.json*")) == []
    index = [json.loads(x) for x in (run_dir / "monitors/file/traces/stream.index.jsonl").read_text().splitlines()]
    assert {r["id"] for r in index} == {t for t, _ in events} and len(index) == 6
    turns = [e for _, e in events if e["event"] == "turn"]
    assert len(turns) == 6 and all(t["tokens"] > 0 and t["text"] for t in turns)
