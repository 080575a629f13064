"""Per-token trainer annotations (``trainer.annotations``, ``docs/monitoring.md``).

Every RL step, each trace branch the trainer trained on gets one annotation record,
handed to the monitors that keep annotations (the file monitor writes it to
``monitors/file/annotations/trainer``; the dashboard's trace viewer overlays it)::

    {"version": 1, "trace_id": ..., "info": {"step", "rank", "loss", "env", "micro_step"},
     "branches": [{"index": i, "advantages": [...], "trainer_logprobs": [...],
                   "entropies": [...], "loss_mask": [...]}]}

Entry j of every array is token j of the branch's ``token_ids`` (prompt and completion
alike, as the trainer saw them). A branch the orchestrator cut at ``seq_len`` has shorter
arrays: only its first ``seq_len`` tokens were trained. The first token has no prediction:
its logprob and entropy are null and it is never in the loss mask. Logprobs and entropies
are this step's forward pass, before the optimizer step, at the temperature the token was
sampled at.

Ranks > 0 have no monitors: their records are gathered to rank 0, which logs them all. The
switch is read on every rank, and so is whether any configured monitor keeps annotations,
so every rank agrees on whether to take part in the gather.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as tdist

from prl.contracts.monitor import Monitor
from prl_trainer_torch.token_export import Sequence, host_lists_later, sequences

if TYPE_CHECKING:  # annotations only
    from prl.config.components import TrainerConfig

VERSION = 1


def keeps_annotations(monitor: type | Monitor) -> bool:
    """Whether a monitor (class or instance) overrides the contract's no-op ``log_annotations``."""
    cls = monitor if isinstance(monitor, type) else type(monitor)
    return cls.log_annotations is not Monitor.log_annotations


def wanted(config: TrainerConfig) -> bool:
    """``trainer.annotations`` is on and some enabled monitor section keeps annotations
    (read from the config, so ranks without monitors decide the same as rank 0)."""
    if not getattr(config, "annotations", False):
        return False
    section = getattr(config, "monitors", None)
    if section is None:
        return False
    configs = [getattr(section, key) for key in type(section).model_fields]
    return any(keeps_annotations(cfg.plugin_class()) for cfg in configs if cfg is not None)


class Fanout:
    """Hands each micro-batch's forward results to several observers (the token exporter
    and the annotation collector both read them from ``run_micro_batches``)."""

    def __init__(self, *observers: Any) -> None:
        self.observers = [o for o in observers if o is not None]

    def add(self, micro_step: int, mb: Any, logp: torch.Tensor, entropy: torch.Tensor) -> None:
        for observer in self.observers:
            observer.add(micro_step, mb, logp, entropy)


class AnnotationCollector:
    """Builds this rank's annotation records of one step (see module docstring).

    ``add`` only keeps the micro-batch's tensors: copying them to the host there would make
    the CPU wait for each forward pass before it can queue the backward. The records are
    built in ``gather``, after every micro-batch of the step has been queued, from one copy
    of all of them."""

    def __init__(self, rank: int, world: int, loss_name: str) -> None:
        self.rank, self.world, self.loss_name = rank, world, loss_name
        self.step = 0
        self._pending: list[tuple[int, Any, torch.Tensor, torch.Tensor]] = []

    def begin(self, step: int) -> None:
        """Start step ``step`` with no records."""
        self.step, self._pending = step, []

    def add(self, micro_step: int, mb: Any, logp: torch.Tensor, entropy: torch.Tensor) -> None:
        """Keep micro-batch ``mb``'s forward results for its records (one per real sequence)."""
        self._pending.append((micro_step, mb, logp.detach(), entropy.detach()))

    @property
    def records(self) -> list[dict[str, Any]]:
        """This rank's records of the step so far."""
        return self.records_later()()

    def records_later(self) -> Callable[[], list[dict[str, Any]]]:
        """:attr:`records` in two halves: their one device-to-host copy is queued now, and
        the returned function waits for it and builds them (see :class:`NoteWriter`)."""
        names = ("advantages", "trainer_logprobs", "entropies", "loss_mask")
        kept = []  # padding micro-batches have no sequences: nothing of theirs is copied
        for micro_step, mb, logp, entropy in self._pending:
            parts = list(sequences(mb))
            if parts:
                kept.append((micro_step, parts, (mb.advantages, logp, entropy, mb.loss_mask)))
        lists = host_lists_later([t for *_, tensors in kept for t in tensors])

        def build() -> list[dict[str, Any]]:
            values = iter(lists())
            out = []
            for micro_step, parts, _ in kept:
                out.extend(self._records(micro_step, parts, {name: next(values) for name in names}))
            return out

        return build

    def _records(self, micro_step: int, parts: list[Sequence], arrays: dict[str, list]) -> list[dict[str, Any]]:
        out = []
        for seq in parts:
            branch: dict[str, Any] = {"index": seq.branch_index}
            for name, values in arrays.items():
                branch[name] = values[seq.start : seq.stop]
            if seq.stop > seq.start:
                # Nothing in its document predicts the first token (the trainer scores it 0).
                branch["trainer_logprobs"][0] = branch["entropies"][0] = None
            info = {"step": self.step, "rank": self.rank, "loss": self.loss_name, "env": seq.env_name}
            info["micro_step"] = micro_step
            out.append({"version": VERSION, "trace_id": seq.trace_id, "info": info, "branches": [branch]})
        return out

    def gather(self) -> list[dict[str, Any]]:
        """Every rank's records of the step on rank 0, in rank order; [] on other ranks
        (collective when ``world > 1``: every rank must call it)."""
        if self.world == 1:
            return self.records
        parts: list[Any] | None = [None] * self.world if self.rank == 0 else None
        tdist.gather_object(self.records, parts, dst=0)
        return [r for part in parts or [] for r in part]


class NoteWriter:
    """Hands each step's records to the monitors, on a background thread with one rank.

    Building and writing a step's records is Python work over every token (tens of
    milliseconds for a 32k-token step); done in line, the GPU would wait for it between the
    backward and the optimizer. Here the step only queues the records' copy to the host and
    a worker thread builds and writes them while the optimizer and the next step run. Steps
    are written in order, and :meth:`wait` (before a checkpoint, at close) lets the last one
    finish. With several ranks the records meet on rank 0 through a collective, which every
    rank must call in step, so they are written in line."""

    def __init__(self, monitors: list[Monitor]) -> None:
        self.monitors = monitors
        self._pool: ThreadPoolExecutor | None = None
        self._last: Future | None = None

    def write(self, collector: AnnotationCollector) -> None:
        """Write ``collector``'s records of its step (see the class docstring)."""
        if collector.world > 1:
            log_annotations(self.monitors, collector.gather(), collector.step)
            return
        build, step = collector.records_later(), collector.step
        self.wait()  # the previous step's records first (and its error, if it failed)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="prl-annotations")
        self._last = self._pool.submit(lambda: log_annotations(self.monitors, build(), step))

    def wait(self) -> None:
        """Until every step handed over is written; re-raises a failed write."""
        last, self._last = self._last, None
        if last is not None:
            last.result()

    def close(self) -> None:
        self.wait()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def log_annotations(monitors: list[Monitor], records: list[dict[str, Any]], step: int) -> None:
    """Hand ``records`` to the monitors that keep annotations (rank 0's monitors)."""
    if not records:
        return
    for monitor in monitors:
        if keeps_annotations(monitor):
            monitor.log_annotations(records, step)
