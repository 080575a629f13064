"""``metrics.jsonl`` across a resume: rows of a relaunch carry their attempt, and the merged
reader keeps one row per (producer, step), the newest attempt's."""

import json

from prl_monitor_file import FileMonitor, metric_by_step, read_metrics


def _monitor(run_dir, producer, monkeypatch, attempt):
    monkeypatch.setenv("PRL_ATTEMPT_CONFIG_DIR", str(run_dir / "configs" / f"attempt_{attempt}"))
    return FileMonitor(FileMonitor.Config(), run_dir, producer, "run")


def test_a_relaunch_marks_its_rows_and_the_reader_keeps_the_newest_attempt(tmp_path, monkeypatch):
    first = _monitor(tmp_path, "trainer", monkeypatch, 1)
    for step in (1, 2, 3):
        first.log({"loss/all": float(step)}, step=step)
    first.log({"extra": 7.0}, step=3)  # a second row for one step is merged, not dropped
    first.close()  # killed after step 3; the checkpoint was step 2
    second = _monitor(tmp_path, "trainer", monkeypatch, 2)
    for step in (3, 4):
        second.log({"loss/all": 10.0 + step}, step=step)
    second.log({"inference/queue": 1.0}, step=None)
    second.close()
    path = tmp_path / "monitors/file/metrics.jsonl"
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r.get("attempt") for r in raw] == [None, None, None, None, 2, 2, 2]
    rows = read_metrics(path)
    assert [(r["step"], r.get("attempt", 1)) for r in rows] == [(1, 1), (2, 1), (3, 2), (4, 2), (None, 2)]
    assert metric_by_step(rows, "trainer", "loss/all") == {1: 1.0, 2: 2.0, 3: 13.0, 4: 14.0}
    assert "extra" not in rows[2]  # the killed attempt's step-3 rows are gone as a whole


def test_rows_of_one_attempt_merge_and_producers_stay_apart(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [
        {"step": 1, "a": 1, "producer": "orch"},
        {"step": 1, "b": 2, "producer": "orch"},
        {"step": 1, "a": 5, "producer": "trainer"},
        {"step": 1, "a": 9, "producer": "orch", "attempt": 3},
        {"step": 1, "c": 1, "producer": "orch", "attempt": 2},  # older than attempt 3: dropped
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 2, "a"')  # torn tail
    rows = read_metrics(path)
    assert [(r["producer"], r["a"]) for r in rows] == [("orch", 9), ("trainer", 5)]
    assert "b" not in rows[0] and "c" not in rows[0]
