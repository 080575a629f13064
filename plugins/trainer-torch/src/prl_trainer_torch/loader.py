"""The SFT dataloader: epochs of packed rows, split into steps and ranks, with a cursor.

Every rank builds the same stream of packed rows (the order depends only on the seed and
the epoch, never on the world size), and a step takes the next ``batch_size /
micro_batch_size`` rows of it: rank r trains rows ``[r * accum, (r + 1) * accum)`` of the
step, one row per micro-batch. So a step trains the same tokens on any number of ranks,
and the global loss-token count of a step is known on every rank without communication.

The cursor ``{epoch, rows}`` is all a resume needs: the epoch's stream is rebuilt and the
consumed rows are skipped. Epoch e shuffles with ``seed + e``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from prl.config.errors import DataError
from prl_trainer_torch.data import PackedRow, RowRenderer, Sample, load_dataset_rows, pack, subset_labels
from prl_trainer_torch.prefetch import ahead, parallel_samples


class SampleSource:
    """Samples of one epoch, in the epoch's order."""

    def __init__(self, data_cfg: Any, renderer_cfg: Any = None, tokenizer: str | None = None, vocab: int = 0) -> None:
        self.args = (data_cfg, renderer_cfg, tokenizer, vocab)  # to rebuild it in a worker process
        self.cfg = data_cfg
        if data_cfg.type == "fake":
            self.rows = None
            self.vocab = vocab
        else:
            self.rows = load_dataset_rows(data_cfg)
            self.renderer = RowRenderer(data_cfg, renderer_cfg, tokenizer)

    def __len__(self) -> int:
        return len(self.rows) if self.rows is not None else 1 << 30

    def labels(self) -> list[str]:
        """Names of the interleaved subsets (or splits), indexed by ``Sample.subset``."""
        if self.rows is None:
            return []
        return subset_labels(self.cfg)

    def _order(self, epoch: int):
        n = len(self.rows)
        if self.cfg.shuffle:
            return torch.randperm(n, generator=torch.Generator().manual_seed(self.cfg.seed + epoch)).tolist()
        return range(n)

    def epoch_positions(self, epoch: int, offset: int = 0, stride: int = 1) -> Iterator[tuple[int, Sample | None]]:
        """(position, sample or None when the row has nothing to train) for positions
        ``offset, offset + stride, ...`` of the epoch order."""
        order = self._order(epoch)
        for position in range(offset, len(order), stride):
            i = int(order[position])
            yield position, self.renderer.sample(self.rows[i], i, self.cfg.seq_len)

    def epoch(self, epoch: int, workers: int = 0) -> Iterator[Sample]:
        """The epoch's samples in order; ``workers`` > 1 renders them in that many processes."""
        if self.rows is None:
            yield from self._fake(epoch)
        elif workers > 1:
            yield from parallel_samples(type(self), self.args, epoch, workers)
        else:
            yield from (s for _, s in self.epoch_positions(epoch) if s is not None)

    def _fake(self, epoch: int) -> Iterator[Sample]:
        # Random documents of 1/8 to all of seq_len tokens, every target trained on.
        gen = torch.Generator().manual_seed(self.cfg.seed + epoch)
        low = max(2, self.cfg.seq_len // 8)
        while True:
            n = int(torch.randint(low, self.cfg.seq_len + 1, (1,), generator=gen))
            ids = torch.randint(0, self.vocab, (n + 1,), generator=gen).tolist()
            yield Sample(ids[:-1], ids[1:], [True] * n)


@dataclass
class StepBatch:
    """One step: this rank's rows and global counts of loss tokens, real tokens, samples."""

    rows: list[PackedRow]
    loss_tokens: int
    tokens: int
    samples: int


class SFTLoader:
    """Steps of packed micro-batches for one rank, resumable through :meth:`state_dict`."""

    def __init__(self, source: SampleSource, data_cfg: Any, rank: int, world: int) -> None:
        self.source = source
        self.row_len = data_cfg.seq_len * data_cfg.micro_batch_size
        self.rows_per_step = data_cfg.batch_size // data_cfg.micro_batch_size
        if self.rows_per_step % world:
            raise DataError(
                f"data.batch_size / data.micro_batch_size ({self.rows_per_step}) must be divisible by "
                f"the world size ({world})"
            )
        self.accum = self.rows_per_step // world
        self.workers = data_cfg.num_workers
        self.rank = rank
        self.epoch = 0
        self.rows = 0
        # Samples and tokens trained so far per interleaved subset (all ranks' rows).
        self.seen_samples: dict[int, int] = {}
        self.seen_tokens: dict[int, int] = {}
        self._it: Iterator[PackedRow] | None = None

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "rows": self.rows,
            "seen_samples": dict(self.seen_samples),
            "seen_tokens": dict(self.seen_tokens),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.rows = int(state["epoch"]), int(state["rows"])
        self.seen_samples = {int(k): int(v) for k, v in state.get("seen_samples", {}).items()}
        self.seen_tokens = {int(k): int(v) for k, v in state.get("seen_tokens", {}).items()}
        self._it = None

    def close(self) -> None:
        """Stop background rendering (threads and worker processes)."""
        close = getattr(self._it, "close", None)
        if close is not None:
            close()
        self._it = None

    def _stream(self) -> Iterator[PackedRow]:
        epoch, skip = self.epoch, self.rows

        def rows() -> Iterator[PackedRow]:
            it = pack(self.source.epoch(epoch, self.workers), self.row_len)
            for _ in range(skip):
                next(it)
            yield from it

        if self.workers == 0:
            return rows()
        # Keep about two steps of rows ready while the current step trains.
        return ahead(rows, depth=2 * self.rows_per_step)

    def _next_row(self) -> PackedRow:
        if self._it is None:
            self._it = self._stream()
        for _ in range(2):
            row = next(self._it, None)
            if row is not None:
                self.rows += 1
                return row
            self.epoch, self.rows = self.epoch + 1, 0
            self.close()
            self._it = self._stream()
        raise DataError("data: the dataset yields no trainable samples (every row is empty or masked)")

    def next_step(self) -> StepBatch:
        """This rank's micro-batches of the next step and the step's global counts."""
        rows = [self._next_row() for _ in range(self.rows_per_step)]
        for r in rows:
            for subset, length in zip(r.subsets, r.lengths, strict=True):
                self.seen_samples[subset] = self.seen_samples.get(subset, 0) + 1
                self.seen_tokens[subset] = self.seen_tokens.get(subset, 0) + length
        return StepBatch(
            rows[self.rank * self.accum : (self.rank + 1) * self.accum],
            loss_tokens=sum(int(r.loss_mask.sum()) for r in rows),
            tokens=sum(r.num_tokens for r in rows),
            samples=sum(r.num_samples for r in rows),
        )

    def steps_per_epoch(self) -> int:
        """Full steps in epoch 0 (renders the whole epoch once)."""
        n = sum(1 for _ in pack(self.source.epoch(0), self.row_len))
        return n // self.rows_per_step


def eval_rows(source: SampleSource, data_cfg: Any, rank: int, world: int) -> list[PackedRow]:
    """This rank's share of one unshuffled pass over a validation set."""
    samples = source.epoch(0)
    if isinstance(source, SampleSource) and source.rows is None:
        # Fake data never ends: a pass over it is one batch of random documents (the same
        # ones at every validation, since epoch 0 always draws from the same seed).
        samples = itertools.islice(samples, data_cfg.batch_size)
    rows = list(pack(samples, data_cfg.seq_len * data_cfg.micro_batch_size))
    return rows[rank::world]
