"""``NoteWriter``: with one rank a step's annotation records are built and written on a
background thread, in step order, while the step goes on (prl_trainer_torch.annotations)."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from prl_trainer_torch import annotations as notes
from prl_trainer_torch.logprobs import chunked_logprobs
from prl_trainer_torch.rl_step import run_micro_batches, to_micro_batch

from prl.config.components import TrainerConfig
from prl.orchestrator.packing import micro_batch
from prl.types import TrainingSample

CPU = torch.device("cpu")
BASE = {"weight_broadcast": {"type": "filesystem"}}


class TinyPolicy(torch.nn.Module):
    """An embedding scored by an output matrix (the real log-prob kernel)."""

    def __init__(self, vocab: int = 12, dim: int = 6) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))
        self.head = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))

    def forward(self, input_ids, position_ids, targets, temps, entropy=False, bounds=None):
        return chunked_logprobs(self.emb[input_ids], self.head, targets, temps, chunk_size=4, entropy=entropy)


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


def _step_into(collector, policy, step: int) -> None:
    a, b = _samples()
    collector.begin(step)
    mb = to_micro_batch(micro_batch([a, b]), CPU)
    loss = TrainerConfig.model_validate(BASE | {"loss": {"type": "ipo"}}).loss.build()
    run_micro_batches(policy, loss, [mb], world=1, export=notes.Fanout(None, collector))


def test_one_rank_writes_each_steps_records_off_the_step_in_order(monkeypatch):
    """The step hands its records over and goes on; a worker thread writes them, step after
    step, and ``wait`` (a checkpoint, close) returns once the last is written."""
    keeper = _SlowKeeper()
    monkeypatch.setattr(notes, "keeps_annotations", lambda m: m is keeper)
    writer, collector, policy = notes.NoteWriter([keeper]), notes.AnnotationCollector(0, 1, "ipo"), TinyPolicy()
    for step in (1, 2, 3):
        _step_into(collector, policy, step)
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
    writer, collector, policy = notes.NoteWriter([keeper]), notes.AnnotationCollector(0, 1, "ipo"), TinyPolicy()
    _step_into(collector, policy, 1)
    writer.write(collector)
    _step_into(collector, policy, 2)
    with pytest.raises(OSError, match="disk full"):
        writer.write(collector)
