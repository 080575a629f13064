"""The wandb monitor with the real wandb client in offline mode; the run file is read back."""

import dataclasses
import json
import struct
import time

import pytest
from prl_monitor_wandb import WandbMonitor
from prl_monitor_wandb.monitor import run_id

from prl.config.monitors import MonitorsSection
from prl.plugins import get_registry
from prl.types import Branch, Trace

BLOCK = 32768


def _records(run_file):
    """Protobuf records of a .wandb file (leveldb-log framing: 32 KiB blocks, 7-byte headers)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    pos, pending, out = 7, b"", []  # the file starts with a 7-byte ':W&B' header
    while pos + 7 <= len(data):
        room = BLOCK - pos % BLOCK
        if room < 7:
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            pos += room
            continue
        body, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = body if kind in (1, 2) else pending + body
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


def _complete_records(run_file, timeout=30.0):
    """The records once the run's closing 'exit' record is on disk.

    finish() hands the last records to wandb's writer process, which may flush a moment
    later; reading too early sees a partial file.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            records = _records(run_file)
        except Exception:  # a record cut mid-write does not parse yet
            records = []
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.1)


def _history(records):
    rows = []
    for record in records:
        if record.WhichOneof("record_type") == "history":
            # keys with '/' are stored split into nested_key
            items = record.history.item
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items})
    return rows


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


def test_registered_and_off_by_default():
    assert get_registry().get("monitors", "wandb") is WandbMonitor
    assert MonitorsSection(component=True).model()().wandb is None
    assert WandbMonitor.Config().project == "prl"


def test_offline_run_records_metrics_and_traces(tmp_path, offline):
    monitor = WandbMonitor(WandbMonitor.Config(tags=["ci"]), tmp_path, "orch", "reverse-text--tiny--1a2b3c4d")
    monitor.log({"reward/all/mean": 0.5, "loss/all": 1.25}, step=1)
    monitor.log({"reward/all/mean": 0.75}, step=2)
    monitor.log({"inference/queue": 3.0}, step=None)
    branch = Branch([1, 2, 3], [False, True, True], [0.0, -1.0, -2.0], advantages=[0.0, 0.25, 0.25])
    messages = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "olleh"}]
    trace = Trace("t0", "task", "reverse-text", [branch], reward=0.75, messages=messages)
    monitor.log_traces([dataclasses.asdict(trace)], step=2)
    monitor.close()

    (run_file,) = (tmp_path / "monitors/wandb").rglob("run-*.wandb")
    records = _complete_records(run_file)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.project == "prl" and run.display_name == "reverse-text--tiny--1a2b3c4d"
    assert run.run_group == "reverse-text--tiny--1a2b3c4d" and run.job_type == "orch"
    assert run.run_id == run_id(tmp_path, "orch") and list(run.tags) == ["ci"]
    history = _history(records)
    assert [(h.get("step"), h.get("reward/all/mean")) for h in history[:2]] == [(1, 0.5), (2, 0.75)]
    assert history[0]["loss/all"] == 1.25
    assert history[2]["inference/queue"] == 3.0
    table = history[3]  # a table is logged as its file reference, flattened under its key
    assert table["rollouts/train/_type"] == "table-file" and table["rollouts/train/nrows"] == 1
    assert table["step"] == 2
    (table_file,) = run_file.parent.rglob("*.table.json")
    data = json.loads(table_file.read_text())
    assert data["data"] == [[2, "t0", "reverse-text", 0.75, 0.25, 3, 1, "stop", "olleh"]]


def test_run_id_is_stable_per_run_dir_and_producer(tmp_path):
    assert run_id(tmp_path, "trainer") == run_id(tmp_path / "x" / "..", "trainer")
    assert run_id(tmp_path, "trainer") != run_id(tmp_path, "orch")
    assert run_id(tmp_path / "a", "orch") != run_id(tmp_path / "b", "orch")


def test_online_eval_writes_into_the_trainers_run(tmp_path, offline):
    # prl sft's online-eval process logs eval/* into the trainer's W&B run (same id), from
    # its own offline directory so the two processes never write one file.
    monitor = WandbMonitor(WandbMonitor.Config(), tmp_path, "online-eval", "sft-run")
    monitor.log({"eval/reverse-text/avg@1": 0.5}, step=2)
    monitor.close()
    (run_file,) = (tmp_path / "monitors/wandb/online-eval").rglob("run-*.wandb")
    records = _complete_records(run_file)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.run_id == run_id(tmp_path, "trainer") and run.job_type == "trainer"
    assert [(h["step"], h["eval/reverse-text/avg@1"]) for h in _history(records)] == [(2, 0.5)]


def test_online_the_trainers_run_is_shared_and_online_eval_joins_it_as_a_secondary(monkeypatch):
    import wandb
    from prl_monitor_wandb.monitor import _mode

    monkeypatch.setenv("WANDB_MODE", "online")
    trainer, online = _mode(wandb, "trainer", None), _mode(wandb, "online-eval", None)
    assert trainer["settings"].mode == online["settings"].mode == "shared"
    assert (trainer["settings"].x_primary, trainer["settings"].x_update_finish_state) == (True, True)
    assert (online["settings"].x_primary, online["settings"].x_update_finish_state) == (False, False)
    assert online["settings"].x_label == "online-eval"
    assert _mode(wandb, "orch", None)["settings"].mode != "shared"  # its own run, as before
    assert _mode(wandb, "online-eval", "offline")["mode"] == "offline"  # offline cannot share
