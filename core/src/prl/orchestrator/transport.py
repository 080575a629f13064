"""Filesystem rollout transport: ``batches/step_S/rank_r.bin``, one msgpack file per rank.

The orchestrator writes every rank's file under a temporary name in the same directory and
then ``os.replace``-s it into place, so a reader never sees a partial file: a rank file
either does not exist yet or is complete. The trainer of rank ``r`` polls for its own file.

File content (msgpack, floats as 32-bit)::

    {"format": 1, "step": S, "rank": r, "micro_batches": [<micro-batch dict>, ...]}

This module is torch-free; the trainer imports :func:`read_batch` from here.

What the trainer of a run does with it (steps count from 1; version ``v`` is the weights
after step ``v``, the base model being version 0):

1. at start, publish its weights as version ``start - 1`` through the weight transport
   (the orchestrator acknowledges it; for a fresh run inference already serves it);
2. for each step ``S``: ``read_batch(run_dir, S, rank, timeout)``, train on the returned
   micro-batches, then (rank 0) publish version ``S``, the final step included: the
   orchestrator waits to acknowledge it before it exits.

Every rank receives the same number of micro-batches; padding micro-batches have an
all-false ``loss_mask`` and an empty ``trace_ids`` entry. The micro-batch fields are those
of :mod:`prl.orchestrator.packing`.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import msgpack

from prl import layout
from prl.fsutil import write_atomic

FORMAT = 1


def batches_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "batches"


def batch_path(run_dir: Path, step: int, rank: int) -> Path:
    return layout.step_dir(batches_dir(run_dir), step) / f"rank_{rank}.bin"


def write_batch(run_dir: Path, step: int, ranks: list[list[dict[str, Any]]]) -> list[Path]:
    """Write ``ranks[r]`` (rank r's micro-batches) for ``step``; returns the paths written."""
    paths = []
    for rank, micro_batches in enumerate(ranks):
        path = batch_path(run_dir, step, rank)
        payload = {"format": FORMAT, "step": step, "rank": rank, "micro_batches": micro_batches}
        write_atomic(path, msgpack.packb(payload, use_single_float=True))
        paths.append(path)
    return paths


def read_batch(run_dir: Path, step: int, rank: int, timeout: float, poll: float = 0.05) -> list[dict[str, Any]]:
    """Wait up to ``timeout`` seconds for rank ``rank``'s batch of ``step``; return its micro-batches.

    Raises TimeoutError naming the file waited for and the newest step shipped so far.
    """
    path = batch_path(run_dir, step, rank)
    deadline = time.monotonic() + timeout
    delay = min(poll, 0.01)
    while not path.exists():
        if time.monotonic() >= deadline:
            newest = newest_step(run_dir)
            shipped = f"newest shipped: {layout.step_name(newest)}" if newest is not None else "nothing shipped yet"
            raise TimeoutError(
                f"waited {timeout:g}s for batch step {step} rank {rank} at {path} ({shipped}); "
                "is the orchestrator running and producing rollouts?"
            )
        time.sleep(delay)
        delay = min(delay * 2, poll * 10)
    with open(path, "rb") as fh:
        payload = msgpack.unpackb(fh.read(), strict_map_key=False)
    if payload.get("format") != FORMAT or payload.get("step") != step or payload.get("rank") != rank:
        header = {k: payload.get(k) for k in ("format", "step", "rank")}
        raise ValueError(f"{path}: unexpected batch header {header}")
    return payload["micro_batches"]


def _steps(base: Path) -> list[int]:
    if not base.is_dir():
        return []
    return sorted(n for child in base.iterdir() if (n := layout.parse_step(child.name)) is not None)


def newest_step(run_dir: Path) -> int | None:
    steps = _steps(batches_dir(run_dir))
    return steps[-1] if steps else None


def prune_batches(run_dir: Path, keep_from: int) -> None:
    """Delete ``batches/step_S`` for every S < ``keep_from`` (already consumed by the trainer)."""
    base = batches_dir(run_dir)
    for step in _steps(base):
        if step < keep_from:
            shutil.rmtree(layout.step_dir(base, step), ignore_errors=True)


class FilesystemBatchSender:
    """Orchestrator side of the filesystem transport (keeps the last three steps on disk)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)

    def send(self, step: int, ranks: list[list[dict[str, Any]]]) -> None:
        write_batch(self.run_dir, step, ranks)
        prune_batches(self.run_dir, step - 3)

    def close(self) -> None:
        pass


class FilesystemBatchReceiver:
    """Trainer side of the filesystem transport: polls for this rank's file."""

    def __init__(self, run_dir: Path, rank: int) -> None:
        self.run_dir, self.rank = Path(run_dir), rank

    def receive(self, step: int, timeout: float) -> list[dict[str, Any]]:
        return read_batch(self.run_dir, step, self.rank, timeout)

    def close(self) -> None:
        pass
