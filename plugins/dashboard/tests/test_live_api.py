"""The dashboard's live API over ``monitors/file/live/`` as the file monitor writes it
during a run: pending and running rows, one episode's events, and 404 once it ended."""

from __future__ import annotations

import dataclasses
import json
import threading
import urllib.error
import urllib.request
from urllib.parse import quote

import pytest
from prl_dashboard.cli import bind
from prl_monitor_file import FileMonitor

from prl.live import LiveEpisodes, report_turn
from prl.types import Branch, Trace

PROMPT = [{"role": "user", "content": "reverse: abc"}]
RUN = "/api/runs/" + quote("exp/run-b", safe="")


@pytest.fixture
def live_run(tmp_path):
    """A run with one episode running (two turns so far) and one dispatched, not started."""
    run = tmp_path / "outputs" / "exp" / "run-b"
    monitor = FileMonitor(FileMonitor.Config(), run, "orch", "run-b")
    episodes = LiveEpisodes([monitor])
    episodes.dispatch("run1", {"env": "reverse-text", "task_id": "t-1", "group": "d1", "kind": "train", "version": 3})
    episodes.dispatch("wait2", {"env": "reverse-text", "task_id": "t-2", "group": "d1", "kind": "train", "version": 3})
    running = episodes.running("run1", PROMPT)
    running.__enter__()
    report_turn({"agent": "default", "turn": 1, "text": "cb", "tokens": 3, "finish_reason": "stop"})
    report_turn({"agent": "default", "turn": 2, "text": "cba", "tokens": 4, "finish_reason": "stop"})
    yield tmp_path / "outputs", run, monitor, running
    monitor.close()


@pytest.fixture
def server(live_run):
    srv = bind([live_run[0]], "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def get(base: str, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(base + path, timeout=10) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_live_lists_running_then_pending_episodes_with_progress(server):
    status, live = get(server, RUN + "/live")
    assert status == 200 and (live["running"], live["pending"]) == (1, 1)
    first, second = live["rows"]
    assert (first["id"], first["status"], first["turns"], first["tokens"]) == ("run1", "running", 2, 7)
    assert (second["id"], second["status"], second["turns"]) == ("wait2", "pending", 0)
    assert first["task_id"] == "t-1" and first["version"] == 3 and first["elapsed"] >= 0


def test_one_live_episode_serves_its_prompt_and_turns_and_404s_once_ended(server, live_run):
    _, run, monitor, running = live_run
    status, ep = get(server, RUN + "/live/run1")
    assert status == 200 and ep["prompt"] == PROMPT
    assert [e["event"] for e in ep["events"]] == ["start", "turn", "turn"]
    assert [e["text"] for e in ep["events"][1:]] == ["cb", "cba"]
    # a turn being appended right now is served only once its line is complete
    with open(run / "monitors" / "file" / "live" / "run1.jsonl", "a") as fh:
        fh.write('{"event":"turn","te')
    assert len(get(server, RUN + "/live/run1")[1]["events"]) == 3
    status, pending = get(server, RUN + "/live/wait2")
    assert status == 200 and pending["row"]["status"] == "pending" and pending["events"] == []

    running.__exit__(None, None, None)  # the episode ends; its trace goes to the stream
    trace = Trace("run1", "t-1", "reverse-text", [Branch([1, 2], [False, True], [0.0, -0.1])], reward=1.0)
    monitor.log_traces([dataclasses.asdict(trace) | {"id": "run1", "kind": "train"}], 1)
    status, body = get(server, RUN + "/live/run1")
    assert status == 404 and "finished" in body["error"]
    assert [r["id"] for r in get(server, RUN + "/live")[1]["rows"]] == ["wait2"]
    found = get(server, RUN + "/episodes?id=run1")[1]
    assert found["total"] == 1 and found["rows"][0]["reward"] == 1.0  # where the viewer sends you next


@pytest.mark.parametrize("trace", ["nope", quote("../pending/wait2", safe=""), ".hidden"])
def test_unknown_or_unsafe_live_ids_are_404(server, trace):
    status, body = get(server, RUN + "/live/" + trace)
    assert status == 404 and body["error"].startswith("not found")


def test_a_run_without_live_files_has_no_live_rows(server, live_run):
    import shutil

    shutil.rmtree(live_run[1] / "monitors" / "file" / "live")
    assert get(server, RUN + "/live") == (200, {"rows": [], "running": 0, "pending": 0})
