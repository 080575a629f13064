"""The key/value cache of the running batch: per-layer buffers with room to grow.

Rows of the running batch started at different times, so their caches have different
lengths. They share one buffer per layer of shape ``[rows, kv_heads, capacity, head_dim]``
whose first ``L`` columns are in use (``L`` = the longest row); ``mask[r, j]`` says whether
column ``j`` of row ``r`` holds a real token. Padding may sit anywhere (rows are left-padded
when they join), which attention handles through the 2-D attention mask, and rotary
positions stay right because each row carries its own next position in ``pos`` and keys are
cached after rotation.

A decode step writes its new key/value column into the buffer in place (transformers'
dynamic cache would copy the whole cache every step); the buffer grows by half when full.
Joining rows pads the shorter side on the left and concatenates along the batch axis;
leaving rows is an index-select followed by dropping leading columns no row uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

HEADROOM = 64


class _BufferLayer(DynamicLayer):
    """A transformers cache layer that appends into a preallocated buffer."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        super().__init__()
        self.buf_k, self.buf_v = keys, values
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        start = self.keys.shape[-2]
        end = start + key_states.shape[-2]
        self.buf_k[:, :, start:end] = key_states
        self.buf_v[:, :, start:end] = value_states
        self.keys, self.values = self.buf_k[:, :, :end], self.buf_v[:, :, :end]
        return self.keys, self.values


@dataclass
class BatchKV:
    keys: list[torch.Tensor]  # [B, H, capacity, D] per layer
    values: list[torch.Tensor]
    mask: torch.Tensor  # [B, L] bool
    pos: torch.Tensor  # [B] long: position of the next token of each row

    @property
    def rows(self) -> int:
        return self.mask.shape[0]

    @property
    def length(self) -> int:
        return self.mask.shape[1]

    def as_cache(self, new_tokens: int = 1) -> DynamicCache:
        """A transformers cache over these buffers with room for ``new_tokens`` more columns."""
        if self.keys[0].shape[2] < self.length + new_tokens:
            self._grow(self.length + new_tokens + max(HEADROOM, self.length // 2))
        cache = DynamicCache()
        cache.layers = [_BufferLayer(k, v, self.length) for k, v in zip(self.keys, self.values, strict=False)]
        return cache

    @classmethod
    def from_cache(cls, cache: DynamicCache, mask: torch.Tensor, pos: torch.Tensor) -> BatchKV:
        """Copy a prefill's cache into buffers with headroom.

        Columns that ``mask`` marks as padding are zeroed: a padded query attends to nothing
        and may leave NaN in later layers' keys, and NaN times a zero attention weight is
        still NaN.
        """
        pad = ~mask[:, None, :, None]
        length = mask.shape[1]
        keys, values = [], []
        for layer in cache.layers:
            for src, out in ((layer.keys, keys), (layer.values, values)):
                b, h, _, d = src.shape
                buf = src.new_zeros(b, h, length + HEADROOM, d)
                buf[:, :, :length] = src.masked_fill(pad, 0.0)
                out.append(buf)
        return cls(keys, values, mask, pos)

    def after_step(self) -> BatchKV:
        """The state after a one-token decode step for every row (the buffers were written in place)."""
        col = torch.ones(self.rows, 1, dtype=torch.bool, device=self.mask.device)
        return BatchKV(self.keys, self.values, torch.cat([self.mask, col], 1), self.pos + 1)

    def select(self, index: torch.Tensor) -> BatchKV | None:
        """Keep the rows in ``index`` (in that order); None when no row is left."""
        if index.numel() == 0:
            return None
        if index.numel() == self.rows and bool((index == torch.arange(self.rows, device=index.device)).all()):
            return self
        mask = self.mask.index_select(0, index)
        used = mask.any(0).nonzero()
        start = int(used[0]) if used.numel() else mask.shape[1]
        keys = [k.index_select(0, index)[:, :, start:] for k in self.keys]
        values = [v.index_select(0, index)[:, :, start:] for v in self.values]
        return BatchKV(keys, values, mask[:, start:], self.pos.index_select(0, index))

    def repeat(self, counts: torch.Tensor) -> BatchKV:
        """Repeat row ``r`` ``counts[r]`` times (n completions share one prefill)."""
        if bool((counts == 1).all()):
            return self
        rep = lambda t: t.repeat_interleave(counts, dim=0)  # noqa: E731
        return BatchKV([rep(k) for k in self.keys], [rep(v) for v in self.values], rep(self.mask), rep(self.pos))

    def join(self, other: BatchKV | None) -> BatchKV:
        """Rows of ``self`` followed by the rows of ``other``."""
        if other is None:
            return self
        length = max(self.length, other.length)
        capacity = length + HEADROOM
        keys = [self._stack(a, b, length, capacity, other) for a, b in zip(self.keys, other.keys, strict=False)]
        values = [self._stack(a, b, length, capacity, other) for a, b in zip(self.values, other.values, strict=False)]
        mask = torch.cat([_left_pad(self.mask, length), _left_pad(other.mask, length)])
        return BatchKV(keys, values, mask, torch.cat([self.pos, other.pos]))

    def _stack(self, a: torch.Tensor, b: torch.Tensor, length: int, capacity: int, other: BatchKV) -> torch.Tensor:
        out = a.new_zeros(a.shape[0] + b.shape[0], a.shape[1], capacity, a.shape[3])
        out[: a.shape[0], :, length - self.length : length] = a[:, :, : self.length]
        out[a.shape[0] :, :, length - other.length : length] = b[:, :, : other.length]
        return out

    def _grow(self, capacity: int) -> None:
        def grown(t: torch.Tensor) -> torch.Tensor:
            out = t.new_zeros(t.shape[0], t.shape[1], capacity, t.shape[3])
            out[:, :, : self.length] = t[:, :, : self.length]
            return out

        self.keys = [grown(k) for k in self.keys]
        self.values = [grown(v) for v in self.values]


def _left_pad(mask: torch.Tensor, length: int) -> torch.Tensor:
    return torch.nn.functional.pad(mask, (length - mask.shape[1], 0), value=False)
