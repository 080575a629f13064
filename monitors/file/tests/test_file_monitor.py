"""The file monitor against ``docs/monitoring.md``: rows, appends, traces, chunks, zstd."""

import dataclasses
import json
import logging
import math
import shutil
import subprocess

import pytest
from prl_monitor_file import FileMonitor, read_trace
from prl_monitor_file import stream as stream_mod

from prl.config.monitors import MonitorsSection
from prl.plugins import get_registry
from prl.types import Branch, Trace


class Scalar:
    """Stands in for a 0-d tensor / numpy scalar: anything with .item()."""

    def __init__(self, value):
        self.value = value

    def item(self):
        return self.value


def _monitor(run_dir, producer="orch", **cfg):
    return FileMonitor(FileMonitor.Config(**cfg), run_dir, producer, "run")


def _rows(run_dir):
    lines = (run_dir / "monitors/file/metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _trace(i, reward=0.5):
    branch = Branch(
        token_ids=[1, 2, 3, 4],
        sampled_mask=[False, False, True, True],
        logprobs=[0.0, 0.0, -0.123456789, -2.0000049],
        advantages=[0.0, 0.0, reward - 0.25, reward - 0.25],
    )
    trace = Trace(f"t{i}", "task-7", "reverse-text", [branch], reward=reward, turns=1)
    return dataclasses.asdict(trace)


def test_registered_and_on_by_default():
    assert get_registry().get("monitors", "file") is FileMonitor
    section = MonitorsSection(component=True).model()()
    assert isinstance(section.file, FileMonitor.Config)
    cfg = FileMonitor.Config()
    assert (cfg.chunk_bytes, cfg.compress, cfg.float_decimals, cfg.path) == (5 * 1024**3, True, 4, None)


def test_rows_have_step_time_and_producer_and_append(tmp_path):
    trainer, orch = _monitor(tmp_path, "trainer"), _monitor(tmp_path, "orch")
    trainer.log({"loss/all": 0.5, "optim/lr": Scalar(1e-6)}, step=1)
    orch.log({"reward/all/mean": 1, "ok": True}, step=1)
    orch.log({"inference/queue": 3.0}, step=None)
    trainer.close()
    orch.close()
    again = _monitor(tmp_path, "eval")  # a later process appends, never truncates
    again.log({"eval/env/avg@1": 0.25}, step=2)
    again.close()
    rows = _rows(tmp_path)
    assert [(r["step"], r["producer"]) for r in rows] == [(1, "trainer"), (1, "orch"), (None, "orch"), (2, "eval")]
    assert rows[0]["loss/all"] == 0.5 and rows[0]["optim/lr"] == 1e-6
    assert rows[1]["reward/all/mean"] == 1 and rows[1]["ok"] == 1
    assert all(isinstance(r["time"], float) for r in rows)
    assert list(rows[0])[:2] == ["step", "time"] and list(rows[0])[-1] == "producer"


def test_rows_are_on_disk_before_close(tmp_path):
    monitor = _monitor(tmp_path)
    monitor.log({"a": 1.0}, step=3)
    assert _rows(tmp_path)[0]["a"] == 1.0  # not buffered
    monitor.close()


def test_non_finite_values_are_dropped_with_a_warning(tmp_path, caplog):
    monitor = _monitor(tmp_path)
    with caplog.at_level(logging.WARNING, logger="prl.monitors.file"):
        monitor.log({"good": 1.5, "nan": math.nan, "inf": -math.inf, "text": "x", "t": Scalar(math.inf)}, 4)
    monitor.close()
    row = _rows(tmp_path)[0]
    assert "good" in row and not {"nan", "inf", "text", "t"} & set(row)
    assert "nan" in caplog.text and "inf" in caplog.text


def test_relative_path_is_under_run_dir(tmp_path):
    monitor = _monitor(tmp_path, path="elsewhere")
    monitor.log({"a": 1.0}, 1)
    monitor.close()
    assert (tmp_path / "elsewhere/metrics.jsonl").exists()


def test_traces_are_rounded_indexed_and_readable(tmp_path):
    monitor = _monitor(tmp_path, float_decimals=3)
    monitor.log_traces([_trace(0, 1.0), _trace(1, 0.0)], step=5)
    monitor.close()
    traces = tmp_path / "monitors/file/traces"
    lines = (traces / "stream/00000.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert first["branches"][0]["logprobs"] == [0.0, 0.0, -0.123, -2.0]
    index = [json.loads(line) for line in (traces / "stream.index.jsonl").read_text().splitlines()]
    assert [r["id"] for r in index] == ["t0", "t1"]
    row = index[1]
    assert row["offset"] == len(lines[0]) + 1 and row["chunk"] == 0
    expected = {"kind": "train", "env": "reverse-text", "group": "task-7", "ok": True, "reward": 0.0}
    assert {k: row[k] for k in expected} == expected
    assert (row["advantage"], row["tokens"], row["turns"], row["branches"]) == (-0.25, 4, 1, 1)
    assert (row["stop_condition"], row["truncated"], row["step"]) == ("stop", False, 5)
    assert set(row) >= {"dispatch", "arrival", "duration"}
    assert read_trace(traces / "stream", row["chunk"], row["offset"])["trace_id"] == "t1"


def test_chunks_roll_over_and_resume_in_a_new_process(tmp_path):
    monitor = _monitor(tmp_path, chunk_bytes=600, compress=False)
    monitor.log_traces([_trace(i) for i in range(3)], step=1)
    monitor.close()
    again = _monitor(tmp_path, chunk_bytes=600, compress=False)
    again.log_traces([_trace(3)], step=2)
    again.close()
    traces = tmp_path / "monitors/file/traces"
    index = [json.loads(line) for line in (traces / "stream.index.jsonl").read_text().splitlines()]
    assert len({r["chunk"] for r in index}) >= 2
    for row in index:
        assert read_trace(traces / "stream", row["chunk"], row["offset"])["trace_id"] == row["id"]
    sizes = [p.stat().st_size for p in sorted((traces / "stream").glob("*.jsonl"))]
    assert all(size >= 600 for size in sizes[:-1])


def test_sealed_chunks_are_seekable_zstd_by_default(tmp_path, monkeypatch):
    monkeypatch.setattr(stream_mod, "FRAME_BYTES", 256)  # several frames per chunk
    monitor = _monitor(tmp_path, chunk_bytes=1500)  # compress is on unless turned off
    monitor.log_traces([_trace(i) for i in range(8)], step=1)
    monitor.close()
    stream_dir = tmp_path / "monitors/file/traces/stream"
    sealed = sorted(stream_dir.glob("*.jsonl.zst"))
    assert sealed and not (stream_dir / "00000.jsonl").exists()
    index = [json.loads(line) for line in (stream_dir.parent / "stream.index.jsonl").read_text().splitlines()]
    for row in index:
        assert read_trace(stream_dir, row["chunk"], row["offset"])["trace_id"] == row["id"]
    import struct

    import zstandard

    frames, _, magic = struct.unpack("<IBI", sealed[0].read_bytes()[-9:])
    assert magic == 0x8F92EAB1 and frames > 1
    whole = zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(sealed[0].read_bytes())
    assert whole.decode().count("\n") == sum(1 for r in index if r["chunk"] == 0)
    if shutil.which("zstd"):
        out = subprocess.run(["zstd", "-dc", str(sealed[0])], capture_output=True, check=True).stdout
        assert out == whole


def test_compress_without_zstandard_warns_and_keeps_plain_chunks(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(stream_mod, "zstd_available", lambda: False)
    with caplog.at_level(logging.WARNING, logger="prl.monitors.file"):
        monitor = _monitor(tmp_path, chunk_bytes=500, compress=True)
    monitor.log_traces([_trace(i) for i in range(3)], step=1)
    monitor.close()
    assert "zstandard" in caplog.text
    stream_dir = tmp_path / "monitors/file/traces/stream"
    assert not list(stream_dir.glob("*.zst")) and len(list(stream_dir.glob("*.jsonl"))) >= 2


def test_importing_the_plugin_does_not_import_torch():
    # the orchestrator writes metrics and traces and never imports torch
    import sys

    code = "import sys, prl_monitor_file.plugin; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_eval_plan_is_merged_into_plan_json(tmp_path):
    mon = _monitor(tmp_path, producer="eval")
    mon.log_plan({"reverse-text": 80}, step=0)
    mon.log_plan({"alphabet-sort": 12}, step=0)
    plan = json.loads((tmp_path / "monitors" / "file" / "plan.json").read_text())
    assert plan == {"reverse-text": {"0": 80}, "alphabet-sort": {"0": 12}}


def _annotation(trace_id, n=3, **extra):
    branch = {"index": 0, "trainer_logprobs": [-0.123456, -1.0, -2.0][:n], "entropies": [0.5] * n, **extra}
    return {"version": 1, "trace_id": trace_id, "info": {"step": 1}, "branches": [branch]}


def test_annotations_get_a_stream_and_an_index_per_producer(tmp_path):
    from prl_monitor_file import read_annotations
    from prl_monitor_file.annotations import producers

    trainer = _monitor(tmp_path, producer="trainer")
    trainer.log_annotations([_annotation("t0"), _annotation("t1")], step=1)
    trainer.log_annotations([_annotation("t0")], step=2)  # the same trace, a later step
    trainer.close()
    orch = _monitor(tmp_path, producer="orch")
    advantages = {"version": 1, "trace_id": "t0", "info": {}, "branches": [{"index": 1, "advantages": [1.0]}]}
    orch.log_annotations([advantages], 1)
    orch.close()
    file_dir = tmp_path / "monitors/file"
    assert (file_dir / "annotations/trainer/00000.jsonl").exists() and producers(file_dir) == ["orch", "trainer"]
    index = [json.loads(x) for x in (file_dir / "annotations/trainer.index.jsonl").read_text().splitlines()]
    rows = [(r["trace_id"], r["step"], r["branches"]) for r in index]
    assert rows == [("t0", 1, [0]), ("t1", 1, [0]), ("t0", 2, [0])]
    assert index[0]["keys"] == ["entropies", "trainer_logprobs"]
    records = read_annotations(file_dir, "trainer", "t0")
    assert [r["info"] for r in records] == [{"step": 1}, {"step": 1}]
    assert records[0]["branches"][0]["trainer_logprobs"] == [-0.1235, -1.0, -2.0]  # float_decimals = 4
    assert read_annotations(file_dir, "orch")[0]["branches"] == [{"index": 1, "advantages": [1.0]}]
    assert read_annotations(file_dir, "nobody") == []


def test_sealed_annotation_chunks_are_compressed_and_still_readable(tmp_path):
    from prl_monitor_file import read_annotations

    monitor = _monitor(tmp_path, producer="trainer", chunk_bytes=300)
    monitor.log_annotations([_annotation(f"t{i}") for i in range(6)], step=1)
    monitor.close()
    file_dir = tmp_path / "monitors/file"
    assert list((file_dir / "annotations/trainer").glob("*.jsonl.zst"))
    assert [r["trace_id"] for r in read_annotations(file_dir, "trainer")] == [f"t{i}" for i in range(6)]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"version": 2, "trace_id": "t", "branches": [{"index": 0, "a": [1]}]}, "version must be 1"),
        ({"version": 1, "trace_id": "", "branches": [{"index": 0, "a": [1]}]}, "trace_id must be a non-empty string"),
        ({"version": 1, "trace_id": "t", "branches": []}, "annotation t: branches must be a non-empty list"),
        ({"version": 1, "trace_id": "t", "branches": [{"a": [1]}]}, "every branch needs an integer index"),
        ({"version": 1, "trace_id": "t", "branches": [{"index": 0}]}, "branch 0 has no per-token array"),
    ],
)
def test_a_malformed_annotation_is_refused_naming_the_problem(tmp_path, record, message):
    monitor = _monitor(tmp_path, producer="trainer")
    with pytest.raises(ValueError, match=message):
        monitor.log_annotations([record], step=1)
    monitor.close()
    assert not (tmp_path / "monitors/file/annotations/trainer.index.jsonl").exists()
