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

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from prl_trainer_torch.data import PackedRow, RowRenderer, Sample, load_dataset_rows, pack


class SampleSource:
    """Samples of one epoch, in the epoch's order."""

    def __init__(self, data_cfg: Any, renderer_cfg: Any = None, tokenizer: str | None = None, vocab: int = 0) -> None:
        self.cfg = data_cfg
        if data_cfg.type == "fake":
            self.rows = None
            self.vocab = vocab
        else:
            self.rows = load_dataset_rows(data_cfg)
            self.renderer = RowRenderer(data_cfg, renderer_cfg, tokenizer)

    def __len__(self) -> int:
        return len(self.rows) if self.rows is not None else 1 << 30

    def epoch(self, epoch: int) -> Iterator[Sample]:
        if self.rows is None:
            yield from self._fake(epoch)
            return
        n = len(self.rows)
        if self.cfg.shuffle:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(self.cfg.seed + epoch)).tolist()
        else:
            order = range(n)
        for i in order:
            sample = self.renderer.sample(self.rows[int(i)], int(i), self.cfg.seq_len)
            if sample is not None:
                yield sample

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
            raise ValueError(
                f"data.batch_size / data.micro_batch_size ({self.rows_per_step}) must be divisible by "
                f"the world size ({world})"
            )
        self.accum = self.rows_per_step // world
        self.rank = rank
        self.epoch = 0
        self.rows = 0
        self._it: Iterator[PackedRow] | None = None

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "rows": self.rows}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.rows = int(state["epoch"]), int(state["rows"])
        self._it = None

    def _stream(self) -> Iterator[PackedRow]:
        it = pack(self.source.epoch(self.epoch), self.row_len)
        for _ in range(self.rows):
            next(it)
        return it

    def _next_row(self) -> PackedRow:
        if self._it is None:
            self._it = self._stream()
        for _ in range(2):
            row = next(self._it, None)
            if row is not None:
                self.rows += 1
                return row
            self.epoch, self.rows = self.epoch + 1, 0
            self._it = self._stream()
        raise ValueError("data: the dataset yields no trainable samples (every row is empty or masked)")

    def next_step(self) -> StepBatch:
        """This rank's micro-batches of the next step and the step's global counts."""
        rows = [self._next_row() for _ in range(self.rows_per_step)]
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
    rows = list(pack(source.epoch(0), data_cfg.seq_len * data_cfg.micro_batch_size))
    return rows[rank::world]
