"""The dashboard's JSON API over a run directory written by the file monitor's own writer."""

from __future__ import annotations

import dataclasses
import json
import threading
import urllib.error
import urllib.request
from urllib.parse import quote

import pytest
from prl_dashboard.cli import bind, main
from prl_monitor_file import FileMonitor

from prl.types import Branch, Trace


def _trace(i: int, reward: float) -> dict:
    branch = Branch(
        token_ids=[10, 11, 12, 13, 14],
        sampled_mask=[False, False, True, True, True],
        logprobs=[0.0, 0.0, -0.5, -1.25, -0.1],
        advantages=[0.0, 0.0, reward - 0.5, reward - 0.5, reward - 0.5],
    )
    trace = Trace(f"trace-{i}", "task-1", "reverse-text", [branch], reward=reward)
    trace.messages = [{"role": "user", "content": "reverse: abc"}, {"role": "assistant", "content": "cba"}]
    return dataclasses.asdict(trace)


ANNOTATION = {"trace_id": "trace-20", "info": {"step": 2}, "branches": [{"index": 0, "entropies": [0.5, 1.5]}]}


@pytest.fixture
def outputs(tmp_path):
    """``outputs/exp/run-a``: metrics of two producers, three episodes, configs, logs, a
    report and a token export of trace-1; written the way a real run writes them."""
    run = tmp_path / "outputs" / "exp" / "run-a"
    orch = FileMonitor(FileMonitor.Config(), run, "orch", "run-a")
    trainer = FileMonitor(FileMonitor.Config(), run, "trainer", "run-a")
    for step in (1, 2):
        orch.log({"reward/all/mean": 0.25 * step}, step)
        trainer.log({"loss/all": 1.0 / step, "entropy/all/mean": 2.0}, step)
        orch.log_traces([_trace(step * 10 + k, 0.25 * k) for k in range(2 if step == 1 else 1)], step)
    if hasattr(trainer, "log_annotations"):
        trainer.log_annotations([{"version": 1} | ANNOTATION], 1)
    orch.close()
    trainer.close()
    resolved = run / "configs" / "attempt_1" / "resolved"
    resolved.mkdir(parents=True)
    (resolved / "trainer.json").write_text(json.dumps({"model": {"name": "nowhere/tiny"}, "loss": {"eps": 0.3}}))
    (run / "configs" / "attempt_1" / "command.txt").write_text("prl rl @ rl.toml\n")
    (run / "configs" / "latest").symlink_to("attempt_1")
    logs = run / "logs" / "attempt_1"
    logs.mkdir(parents=True)
    (logs / "trainer.log").write_text("2026-01-01 00:00:02,000 INFO prl.trainer: step 1\n")
    (logs / "orchestrator.log").write_text(
        "2026-01-01 00:00:01,000 INFO prl.orch: Step 1\nTraceback line\n2026-01-01 00:00:03,000 INFO prl.orch: Step 2\n"
    )
    (run / "logs" / "latest").symlink_to("attempt_1")
    (run / "reports").mkdir()
    (run / "reports" / "summary.md").write_text(
        "---\ntitle: Step summary\n---\n# Findings\n\nReward **rose**.<script>alert(1)</script>\n\n"
        "- [bad](javascript:alert(1))\n- [good](https://example.org)\n"
    )
    export = run / "token_exports" / "step_1"
    export.mkdir(parents=True)
    (export / "rank_0.jsonl").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "step": 1,
                "trace_id": "trace-11",
                "branch_index": 0,
                "entropy": [0.0, 0.1, 0.2, 0.3],
                "is_masked": [False, False, True, False],
            }
        )
        + "\n"  # fmt: skip
    )
    (tmp_path / "outputs" / "not-a-run").mkdir()
    return tmp_path / "outputs"


@pytest.fixture
def server(outputs):
    srv = bind([outputs], "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def get(base: str, path: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(base + path, timeout=10) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


RUN = "/api/runs/" + quote("exp/run-a", safe="")


def test_runs_are_found_under_nested_run_dirs(server):
    status, runs = get(server, "/api/runs")
    assert status == 200
    assert [r["id"] for r in runs] == ["exp/run-a"]
    assert runs[0]["entry"] == "rl" and runs[0]["last_step"] == 2 and runs[0]["attempts"] == [1]
    status, one = get(server, RUN)
    assert status == 200 and one["has_traces"] and one["has_token_exports"]


def test_metrics_follow_the_file_from_an_offset(server, outputs):
    status, first = get(server, RUN + "/metrics?offset=0")
    assert status == 200
    assert [(r["producer"], r["step"]) for r in first["rows"]] == [
        ("orch", 1),
        ("trainer", 1),
        ("orch", 2),
        ("trainer", 2),
    ]
    assert get(server, RUN + f"/metrics?offset={first['offset']}")[1]["rows"] == []
    path = outputs / "exp/run-a/monitors/file/metrics.jsonl"
    with open(path, "a") as fh:
        fh.write(json.dumps({"step": 3, "time": 1.0, "loss/all": 0.1, "producer": "trainer"}) + "\n")
        fh.write('{"step": 4, "tim')  # a row being written: not served until complete
    later = get(server, RUN + f"/metrics?offset={first['offset']}")[1]
    assert [r["step"] for r in later["rows"]] == [3]
    assert get(server, RUN + "/metrics?offset=abc") == (400, {"error": "offset: expected a byte offset, got 'abc'"})


def test_episodes_page_filter_and_full_trace_with_export_overlays(server):
    status, page = get(server, RUN + "/episodes?limit=2")
    assert status == 200 and page["total"] == 3 and len(page["rows"]) == 2
    assert page["rows"][0]["id"] == "trace-20"  # newest first
    assert get(server, RUN + "/episodes?step=1")[1]["total"] == 2
    line = next(r["line"] for r in get(server, RUN + "/episodes")[1]["rows"] if r["id"] == "trace-11")
    status, ep = get(server, RUN + f"/episodes/{line}")
    assert status == 200 and ep["trace"]["messages"][1]["content"] == "cba"
    overlays = ep["branches"][0]["overlays"]
    assert overlays["sampler_logprobs"] == [0.0, 0.0, -0.5, -1.25, -0.1]
    assert overlays["advantages"][2] == -0.25
    # the export had 4 tokens: the fifth (never seen by the trainer) is null
    assert overlays["entropy"] == [0.0, 0.1, 0.2, 0.3, None]
    assert overlays["is_masked"][2] is True
    assert ep["branches"][0]["export_step"] == 1
    assert get(server, RUN + "/episodes/999")[0] == 404


def test_configs_logs_and_reports(server):
    assert get(server, RUN + "/configs")[1] == ["command.txt", "resolved/trainer.json"]
    cfg = get(server, RUN + "/config?name=resolved/trainer.json")[1]
    assert cfg["json"]["loss"]["eps"] == 0.3
    merged = get(server, RUN + "/log")[1]["lines"]
    assert [(m["component"], m["line"][-6:]) for m in merged] == [
        ("orchestrator", "Step 1"), ("orchestrator", "k line"), ("trainer", "step 1"), ("orchestrator", "Step 2"),
    ]  # fmt: skip
    assert {f["name"] for f in get(server, RUN + "/logfiles")[1]} == {"trainer.log", "orchestrator.log"}
    assert get(server, RUN + "/reports")[1] == [{"name": "summary.md", "title": "Step summary"}]
    html = get(server, RUN + "/report?name=summary.md")[1]["html"]
    assert "<strong>rose</strong>" in html and "<script>" not in html and "&lt;script&gt;" in html
    assert 'href="https://example.org"' in html and "javascript:" not in html


@pytest.mark.parametrize(
    "path",
    [
        "/api/runs/nope",
        RUN + "/config?name=../../../../etc/passwd",
        RUN + "/log?name=" + quote("../../configs/latest/command.txt", safe=""),
        RUN + "/report?name=../configs/latest/command.txt",
        RUN + "/unknown",
        "/static/../runs.py",
        "/api/runs/" + quote("../exp/run-a", safe=""),
    ],
)
def test_unknown_paths_and_traversal_are_404_json(server, path):
    status, body = get(server, path)
    assert status == 404 and body["error"].startswith("not found")


def test_the_app_and_its_assets_are_served_from_the_package(server):
    with urllib.request.urlopen(server + "/", timeout=10) as res:
        page = res.read().decode()
    assert "/static/app.js" in page and "http" not in page.replace("http-equiv", "")  # no CDN
    for asset in ("app.js", "traces.js", "app.css"):
        with urllib.request.urlopen(server + "/static/" + asset, timeout=10) as res:
            assert res.status == 200 and len(res.read()) > 1000


def test_bad_flags_and_dirs_are_one_line_and_exit_2(tmp_path, capsys):
    for args, needle in (
        ([str(tmp_path / "missing")], "output_dir:"),
        (["--port", "99999", str(tmp_path)], "--port:"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err


def test_prl_dashboard_command_runs_this_distribution(tmp_path):
    """`prl dashboard` is this distribution's command, added through the plugin registry."""
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-m", "prl", "dashboard", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "output_dir:" in res.stderr, res.stderr


def test_a_taken_port_moves_to_the_next_free_one(outputs):
    first = bind([outputs], "127.0.0.1", None)
    try:
        second = bind([outputs], "127.0.0.1", None)
        assert second.server_address[1] > first.server_address[1] >= 7788
        second.server_close()
    finally:
        first.server_close()


def test_annotations_of_any_producer_join_the_viewer(server):
    from prl_monitor_file import FileMonitor as Writer

    if not hasattr(Writer, "log_annotations"):
        pytest.skip("this prl-monitor-file writes no annotations")
    line = next(r["line"] for r in get(server, RUN + "/episodes")[1]["rows"] if r["id"] == "trace-20")
    overlays = get(server, RUN + f"/episodes/{line}")[1]["branches"][0]["overlays"]
    assert overlays["entropies"] == [0.5, 1.5, None, None, None]  # the trainer's annotation, padded
