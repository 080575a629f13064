"""Decode over a fixed pool of cache slots, replayed as CUDA graphs on a GPU.

On a GPU a decode step of a small model is bound by the host, not the device: transformers'
forward launches several hundred small kernels from Python, and the growing cache of
``kv.BatchKV`` is copied whenever a row joins or leaves. Here every running row owns one
slot of a pool allocated once (``[slots, kv_heads, capacity, head_dim]`` per layer), with
its tokens left-aligned (column ``j`` of a slot holds the row's position ``j``), so rows join
by writing only their own prefill and leave without any copy. A prefill runs its prompts
right-padded with a plain causal mask (the fused attention kernels take it) and writes each
prompt's keys/values straight into its slots. A decode step then has fixed
shapes for a given (batch bucket, length bucket): the batch covers slots ``0..b-1`` (``b``
the smallest bucket holding the highest slot in use; free slots in it compute a throw-away
row), and attention reads the first ``L`` columns (``L`` a multiple of ``LEN_BLOCK`` past
the longest row). On CUDA each such shape is captured once as a CUDA graph and replayed:
one launch per step instead of hundreds. On the CPU, and for shapes not captured, the same
function runs eagerly (the tests check it against the ``BatchKV`` path).

The graph's inputs are buffers it reads in place: the token of each slot (``ids``) and each
slot's next position (``pos``, also where the step writes its key/value column); its output
is the last-position logits of every slot in the batch. Weight updates copy into the
parameters in place, so captured graphs stay valid; a grown pool (more columns or more
slots) drops them, and they are captured again on first use.
"""

from __future__ import annotations

import logging
import math

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

log = logging.getLogger(__name__)

LEN_BLOCK = 128  # attention length granularity: a graph per 128 columns of the longest row


def supports_slots(model: torch.nn.Module) -> bool:
    """Dense decoder-only models with one key/value cache per layer (Llama/Qwen-style)."""
    cfg = model.config
    if any(getattr(cfg, k, None) for k in ("num_experts", "num_local_experts", "n_routed_experts")):
        return False  # the eager expert loop reads token counts back from the GPU
    if getattr(cfg, "layer_types", None) and set(cfg.layer_types) - {"full_attention"}:
        return False  # sliding-window or linear-attention layers keep other state
    return getattr(cfg, "num_key_value_heads", None) is not None


def plain_head(model: torch.nn.Module) -> bool:
    """Whether the model's logits are its output embedding applied to its decoder's last
    hidden state, nothing more (no scaling or soft-capping), so a prefill may compute
    only the rows it needs (``SlotDecoder.prefill``)."""
    cfg = model.config
    if any(getattr(cfg, k, None) for k in ("final_logit_softcapping", "logit_scale", "logits_scaling")):
        return False
    try:
        return model.get_decoder() is not None and model.get_output_embeddings() is not None
    except (AttributeError, NotImplementedError):
        return False


def batch_bucket(rows: int) -> int:
    """The batch size a graph is captured for: the next power of two."""
    return 1 << max(0, math.ceil(math.log2(max(1, rows))))


class _SlotLayer(DynamicLayer):
    """A transformers cache layer over the first ``b`` slots and ``L`` columns of the pool."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, pos: torch.Tensor) -> None:
        super().__init__()
        self.keys, self.values, self._pos = keys, values, pos
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        # one new column per slot, written at that slot's own position
        where = self._pos[:, None, None, None].expand_as(key_states)
        self.keys.scatter_(2, where, key_states)
        self.values.scatter_(2, where, value_states)
        return self.keys, self.values


class SlotDecoder:
    """Slots of the running rows, and the decode step over them (graphs on CUDA)."""

    def __init__(self, model: torch.nn.Module, rows: int, graphs: bool) -> None:
        cfg = model.config
        self.model = model
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.graphs = graphs and self.device.type == "cuda"
        self.layers = cfg.num_hidden_layers
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.rows, self.capacity = 0, 0
        self.host_pos: list[int] = []  # each slot's next position, kept on the host: no read-back
        self.free: list[int] = []
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._mempool = torch.cuda.graph_pool_handle() if self.graphs else None
        self._out: torch.Tensor | None = None  # the graphs' logits, [rows, vocab]
        self._resize(rows, LEN_BLOCK)

    # ----- slots ---------------------------------------------------------------------
    def admit(self, cache: DynamicCache, pads: list[int], lengths: list[int], counts: list[int]) -> list[int]:
        """Copy a left-padded prefill's cache into free slots, ``counts[r]`` slots for row ``r``.

        ``pads[r]`` is row ``r``'s left padding and ``lengths[r]`` its prompt length (both
        known on the host). Returns the slots, row by row.
        """
        width = cache.layers[0].keys.shape[2]
        slots, target, reps = self._take(counts, width)
        dev = self.device
        # left-align each row: column j of the slot takes column pads[r] + j of the prefill
        shift = torch.tensor(pads, device=dev)[:, None] + torch.arange(width, device=dev)[None]
        shift = shift.clamp(max=width - 1)[:, None, :, None].expand(-1, self.kv_heads, -1, self.head_dim)
        for i, layer in enumerate(cache.layers):
            for src, pool in ((layer.keys, self.keys[i]), (layer.values, self.values[i])):
                pool[target, :, :width] = src.gather(2, shift).repeat_interleave(reps, dim=0).to(pool.dtype)
        self._place(slots, target, lengths, counts)
        return slots

    def prefill(self, prompts: list[list[int]], counts: list[int]) -> tuple[torch.Tensor, list[int]]:
        """Run ``prompts`` right-padded, causal (no mask: padding sits after every real token,
        so no real token sees it) and write each one's keys/values into ``counts[r]`` free
        slots, already left-aligned. Returns the logits [len(prompts), vocab] of each prompt's
        last token and the slots, row by row. Columns past a prompt hold the padding's
        keys/values: a decode step masks them and overwrites them one by one."""
        lengths = [len(p) for p in prompts]
        width = max(lengths)
        ids = torch.zeros(len(prompts), width, dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, : len(p)] = torch.tensor(p)
        ids = ids.to(self.device, non_blocking=True)
        positions = torch.arange(width, device=self.device)[None].expand(len(prompts), -1)
        cache = DynamicCache()
        hidden = self.model.get_decoder()(
            input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True
        ).last_hidden_state
        last = torch.tensor(lengths, device=self.device) - 1
        logits = self.model.get_output_embeddings()(hidden[torch.arange(len(prompts), device=self.device), last])
        slots, target, reps = self._take(counts, width)
        for i, layer in enumerate(cache.layers):
            for src, pool in ((layer.keys, self.keys[i]), (layer.values, self.values[i])):
                pool[:, :, :width].index_copy_(0, target, src.repeat_interleave(reps, dim=0).to(pool.dtype))
        self._place(slots, target, lengths, counts)
        return logits, slots

    def _take(self, counts: list[int], width: int) -> tuple[list[int], torch.Tensor, torch.Tensor]:
        """``sum(counts)`` free slots (the pool grown to hold them and ``width`` columns), as a
        list and on the device, with ``counts`` on the device."""
        need = sum(counts)
        if need > len(self.free):
            self._resize(self.rows + need - len(self.free), self.capacity)
        self._resize(self.rows, _round_up(width + 1))
        self.free.sort()
        slots, self.free = self.free[:need], self.free[need:]
        target = torch.tensor(slots, device=self.device)
        return slots, target, torch.tensor(counts, device=self.device)

    def _place(self, slots: list[int], target: torch.Tensor, lengths: list[int], counts: list[int]) -> None:
        """Each slot's next position: its row's prompt length."""
        each = [n for n, c in zip(lengths, counts, strict=True) for _ in range(c)]
        self.pos[target] = torch.tensor(each, device=self.device)
        for s, n in zip(slots, each, strict=True):
            self.host_pos[s] = n

    def release(self, slots: list[int]) -> None:
        """Free ``slots``; their position goes back to 0 so a throw-away row writes in range."""
        if not slots:
            return
        self.pos[torch.tensor(slots, device=self.device)] = 0
        for s in slots:
            self.host_pos[s] = 0
        self.free += slots

    # ----- the decode step -------------------------------------------------------------
    def step(self, tokens: torch.Tensor, slots: list[int], eager: bool = False) -> torch.Tensor:
        """Logits [rows, vocab] of one decode step of ``tokens`` [rows], row r in ``slots[r]``;
        ``eager`` runs the forward without a graph (per-row adapters change between steps)."""
        b = min(batch_bucket(max(slots) + 1), self.rows)
        length = _round_up(max(self.host_pos[s] for s in slots) + 1)
        if length > self.capacity:
            self._resize(self.rows, length)
        index = torch.tensor(slots, device=self.device)
        self.ids.index_copy_(0, index, tokens)
        if self.graphs and not eager:
            logits = self._replay(b, length)
        else:
            logits = self._forward(b, length)
        self.pos.index_add_(0, index, torch.ones_like(index))
        for s in slots:
            self.host_pos[s] += 1
        return logits.index_select(0, index)

    def _forward(self, b: int, length: int) -> torch.Tensor:
        pos = self.pos[:b]
        mask = (self.cols[:length][None, :] <= pos[:, None])[:, None, None, :]
        cache = DynamicCache()
        cache.layers = [
            _SlotLayer(k[:b, :, :length], v[:b, :, :length], pos) for k, v in zip(self.keys, self.values, strict=True)
        ]
        out = self.model(
            input_ids=self.ids[:b, None],
            position_ids=pos[:, None],
            attention_mask=mask,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1]

    def _replay(self, b: int, length: int) -> torch.Tensor:
        entry = self._graphs.get((b, length))
        if entry is None:
            try:
                entry = self._capture(b, length)
            except Exception as exc:  # a model doing something a graph cannot hold
                log.warning("CUDA graph capture failed (%s); decoding without graphs", exc)
                self.graphs = False
                return self._forward(b, length)
            self._graphs[(b, length)] = entry
        entry[0].replay()
        return entry[1]

    def _capture(self, b: int, length: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        # Warm up on a side stream first (lazy initialisation and autotuning must not be
        # captured). The warm-up writes a column at each slot's position, which the real step
        # overwrites with the same column before anything reads it.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            warm = self._forward(b, length)
        torch.cuda.current_stream().wait_stream(side)
        if self._out is None or self._out.shape[0] < self.rows or self._out.dtype != warm.dtype:
            self._out = torch.empty(self.rows, warm.shape[-1], dtype=warm.dtype, device=self.device)
        del warm
        graph = torch.cuda.CUDAGraph()
        # thread_local: the server's threads may touch the GPU meanwhile (reading weights)
        with torch.cuda.graph(graph, pool=self._mempool, capture_error_mode="thread_local"):
            logits = self._forward(b, length)
            # every graph writes into one output buffer, so the pool's memory is shared by
            # all captured shapes instead of each keeping its own [b, vocab] logits alive
            self._out[:b].copy_(logits)
        log.debug("captured a decode graph for %d slots x %d columns", b, length)
        return graph, self._out[:b]

    def _resize(self, rows: int, capacity: int) -> None:
        """Grow the pool to ``rows`` slots and ``capacity`` columns (copying what is there)."""
        if rows <= self.rows and capacity <= self.capacity:
            return
        rows, capacity = max(rows, self.rows), max(capacity, self.capacity)
        shape = (rows, self.kv_heads, capacity, self.head_dim)

        def grown(old: torch.Tensor | None) -> torch.Tensor:
            new = torch.zeros(shape, dtype=self.dtype, device=self.device)
            if old is not None:
                new[: old.shape[0], :, : old.shape[2]] = old
            return new

        olds = self.keys or [None] * self.layers
        self.keys = [grown(k) for k in olds]
        self.values = [grown(v) for v in (self.values or [None] * self.layers)]
        pos = torch.zeros(rows, dtype=torch.long, device=self.device)
        if self.rows:
            pos[: self.rows] = self.pos
        self.pos, self.ids = pos, torch.zeros(rows, dtype=torch.long, device=self.device)
        self.cols = torch.arange(capacity, device=self.device)
        self.free += list(range(self.rows, rows))
        self.host_pos += [0] * (rows - self.rows)
        self.rows, self.capacity = rows, capacity
        self._graphs.clear()  # they read the old buffers
        if self.graphs:
            # The dropped graphs' pool outlives them (its memory is given back lazily) with no
            # user left, and a capture into a pool in that state fails an allocator assert
            # (seen on an H100: every engine fell back to eager). New graphs take a new pool.
            self._mempool = torch.cuda.graph_pool_handle()


def _round_up(n: int) -> int:
    return LEN_BLOCK * max(1, math.ceil(n / LEN_BLOCK))
