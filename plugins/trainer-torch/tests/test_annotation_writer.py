"""``NoteWriter``: with one rank a step's annotation records are built and written on a
background thread, in step order, while the step goes on (prl_trainer_torch.annotations)."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from prl_trainer_torch import annotations as notes
from prl_trainer_torch.rl_step import to_micro_batch

from prl.orchestrator.packing import micro_batch
from prl.types import TrainingSample

CPU = torch.device("cpu")


def _samples():
    out = []
    for ids, trace in (([1, 2, 3, 4, 5], "trace-a"), ([6, 7, 8], "trace-b")):
        n = len(ids)
        s = TrainingSample(ids, [True] * n, [0.5] * n, [-1.0] * n, 1.0, [1.0] * n, [0.0] * n, [0.0] * n, "a")
        s.trace_id, s.branch_index = trace, 0
        out.append(s)
    return out


class _SlowKeeper:
    """A monitor that keeps annotations slowly, noting the thread each step reached it on."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.seen: list[tuple[int, str, list[str]]] = []
        self.fail_at = fail_at

    def log_annotations(self, records, step):
        time.sleep(0.05)
        if step == self.fail_at:
            raise OSError("disk full")
        self.seen.append((step, threading.current_thread().name, [r["trace_id"] for r in records]))


def _step_into(collector, step: int) -> None:
    """``collector`` holds one micro-batch of step ``step`` (its forward results made up)."""
    collector.begin(step)
    mb = to_micro_batch(micro_batch(_samples()), CPU)
    n = mb.input_ids.shape[0]
    collector.add(0, mb, torch.full((n,), -1.0), torch.ones(n))


def test_one_rank_writes_each_steps_records_off_the_step_in_order(monkeypatch):
    """The step hands its records over and goes on; a worker thread writes them, step after
    step, and ``wait`` (a checkpoint, close) returns once the last is written."""
    keeper = _SlowKeeper()
    monkeypatch.setattr(notes, "keeps_annotations", lambda m: m is keeper)
    writer, collector = notes.NoteWriter([keeper]), notes.AnnotationCollector(0, 1, "ipo")
    for step in (1, 2, 3):
        _step_into(collector, step)
        writer.write(collector)
        if step == 1:
            assert keeper.seen == []  # handed over: the monitor (50 ms) has not finished it yet
    assert len(keeper.seen) < 3  # nor the last step's
    writer.close()
    assert [s for s, *_ in keeper.seen] == [1, 2, 3]
    assert all(name.startswith("prl-annotations") for _, name, _ in keeper.seen)
    assert all(ids == ["trace-a", "trace-b"] for *_, ids in keeper.seen)


def test_a_failed_background_write_fails_the_next_step(monkeypatch):
    keeper = _SlowKeeper(fail_at=1)
    monkeypatch.setattr(notes, "keeps_annotations", lambda m: m is keeper)
    writer, collector = notes.NoteWriter([keeper]), notes.AnnotationCollector(0, 1, "ipo")
    _step_into(collector, 1)
    writer.write(collector)
    _step_into(collector, 2)
    with pytest.raises(OSError, match="disk full"):
        writer.write(collector)
