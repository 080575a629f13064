"""Finished groups waiting for a batch, with off-policy control and batch accounting.

Batch ``S`` trains on the weights of version ``S - 1``. A group dispatched at version ``d``
is ``(S - 1) - d`` steps off-policy for batch ``S``; when that exceeds
``max_off_policy_steps`` the group is dropped before the batch is assembled and counted
under ``off_policy/*``.

``batch_size`` counts traces (episodes); a trace may carry several samples (branches).

* ``constant_trainer_batch_size = true``: useless traces (no sample with any rl, ce or
  ref_kl signal) are removed as soon as a group finishes, so the batch is filled with
  exactly ``batch_size`` useful traces.
* ``false``: the batch takes the next ``batch_size`` traces whatever they hold, then useless
  ones are pruned, so the trained batch may be smaller.

A group is split when only part of it fits; its remainder stays first in line for the next
batch (advantages were already computed over the whole group).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from prl.orchestrator.offpolicy import lag, oldest_usable
from prl.orchestrator.samples import TraceSamples


@dataclass
class FinishedGroup:
    dispatch_version: int
    traces: list[TraceSamples]


@dataclass
class Batch:
    traces: list[TraceSamples] = field(default_factory=list)
    lags: list[int] = field(default_factory=list)
    pruned: int = 0

    @property
    def samples(self):
        return [s for t in self.traces for s in t.samples]


class GroupBuffer:
    """FIFO of finished groups (see module docstring)."""

    def __init__(self, batch_size: int, constant: bool, max_off_policy_steps: int) -> None:
        self.batch_size = batch_size
        self.constant = constant
        self.max_off_policy_steps = max_off_policy_steps
        self.groups: deque[FinishedGroup] = deque()
        self.count = 0
        self.dropped_groups = 0
        self.dropped_traces = 0
        self.filtered_traces = 0

    def add(self, group: FinishedGroup) -> None:
        if self.constant:
            kept = [t for t in group.traces if t.useful]
            self.filtered_traces += len(group.traces) - len(kept)
            group = FinishedGroup(group.dispatch_version, kept)
        if group.traces:
            self.groups.append(group)
            self.count += len(group.traces)

    def min_version(self, step: int) -> int:
        """Oldest dispatch version still usable for batch ``step``."""
        return oldest_usable(step, self.max_off_policy_steps)

    def drop_stale(self, step: int) -> None:
        oldest = self.min_version(step)
        kept: deque[FinishedGroup] = deque()
        for group in self.groups:
            if group.dispatch_version < oldest:
                self.dropped_groups += 1
                self.dropped_traces += len(group.traces)
                self.count -= len(group.traces)
            else:
                kept.append(group)
        self.groups = kept

    def ready(self, step: int) -> bool:
        self.drop_stale(step)
        return self.count >= self.batch_size

    def take(self, step: int) -> Batch:
        """Pop exactly ``batch_size`` counted traces for ``step`` (call when :meth:`ready`)."""
        batch = Batch()
        need = self.batch_size
        while need:
            group = self.groups.popleft()
            head, rest = group.traces[:need], group.traces[need:]
            if rest:
                self.groups.appendleft(FinishedGroup(group.dispatch_version, rest))
            need -= len(head)
            self.count -= len(head)
            steps_off = lag(step, group.dispatch_version)
            for trace in head:
                if trace.useful:
                    batch.traces.append(trace)
                    batch.lags.append(steps_off)
                else:
                    batch.pruned += 1
        return batch

    def pop_counters(self) -> dict[str, float]:
        out = {
            "off_policy/dropped_groups": float(self.dropped_groups),
            "off_policy/dropped_traces": float(self.dropped_traces),
            "batch/filtered_traces": float(self.filtered_traces),
        }
        self.dropped_groups = self.dropped_traces = self.filtered_traces = 0
        return out
