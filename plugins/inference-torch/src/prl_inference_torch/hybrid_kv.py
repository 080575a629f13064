"""The running batch's cache for hybrid models: attention keys/values plus linear-attention state.

A Qwen3.5 text model interleaves full-attention layers with Gated DeltaNet ("linear
attention") layers. An attention layer's cache grows with the sequence and lives in
:class:`prl_inference_torch.kv.BatchKV`; a linear layer's cache is two fixed-size tensors per
row, the convolution's last inputs ``[rows, channels, kernel]`` and the recurrent state
``[rows, heads, key_dim, value_dim]``, which each decode step overwrites in place.

:class:`HybridKV` keeps both and offers the same operations as ``BatchKV`` (prefill copy,
one-step advance, row select / repeat / join), so the engine runs a hybrid model with the
same continuous batching. Rows need no alignment in a linear layer: its state has no
sequence axis. Left padding in a prefill leaves the state as a fresh one would be, because
the layer zeroes padded inputs (transformers' ``apply_mask_to_padding_states``): a zero
input adds nothing to the convolution window or to the recurrent state.

:func:`cache_class` picks the class from a model config and refuses, in one line, layer
kinds neither cache handles.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import CacheLayerMixin, LinearAttentionLayer

from prl.config.errors import ConfigError
from prl_inference_torch.kv import BatchKV

ATTENTION = "full_attention"
LINEAR = "linear_attention"


def cache_class(config) -> type[BatchKV] | type[HybridKV]:
    """``HybridKV`` for a model with linear-attention layers, ``BatchKV`` otherwise.

    Raises:
        ConfigError: the model mixes linear attention with layer kinds other than full
            attention, or has no full-attention layer at all.
    """
    kinds = list(getattr(config, "layer_types", None) or [])
    if LINEAR not in kinds:
        return BatchKV
    other = sorted(set(kinds) - {ATTENTION, LINEAR})
    name = getattr(config, "model_type", "this model")
    if other or ATTENTION not in kinds:
        what = f"layer types {', '.join(other)}" if other else "no full-attention layer"
        raise ConfigError(
            f"model.name: {name} has linear-attention layers with {what}; the torch inference "
            "backend caches full attention plus linear attention only (serve it with the vllm backend)",
            "Model error",
        )
    return HybridKV


class _Layers:
    """A stand-in cache holding only some layers, for ``BatchKV.from_cache``."""

    def __init__(self, layers: list) -> None:
        self.layers = layers


@dataclass
class HybridKV:
    attn: BatchKV  # the full-attention layers, in layer order
    conv: list[torch.Tensor]  # per linear layer: [rows, channels, kernel]
    state: list[torch.Tensor]  # per linear layer: [rows, heads, key_dim, value_dim]
    linear: tuple[bool, ...]  # per model layer: whether it is a linear-attention layer

    @property
    def rows(self) -> int:
        return self.attn.rows

    @property
    def length(self) -> int:
        return self.attn.length

    @property
    def mask(self) -> torch.Tensor:
        return self.attn.mask

    @property
    def pos(self) -> torch.Tensor:
        return self.attn.pos

    @classmethod
    def from_cache(cls, cache: DynamicCache, mask: torch.Tensor, pos: torch.Tensor) -> HybridKV:
        """Copy a prefill's cache: attention layers into growable buffers (``BatchKV``),
        linear layers' states as they are."""
        linear = tuple(not isinstance(layer, CacheLayerMixin) for layer in cache.layers)
        attn = BatchKV.from_cache(
            _Layers([la for la, lin in zip(cache.layers, linear, strict=True) if not lin]), mask, pos
        )
        states = [la for la, lin in zip(cache.layers, linear, strict=True) if lin]
        for la in states:
            if la.number_of_states != 1 or la.conv_states[0] is None or la.recurrent_states[0] is None:
                raise RuntimeError(f"{type(la).__name__}: expected one convolution and one recurrent state")
        return cls(attn, [la.conv_states[0] for la in states], [la.recurrent_states[0] for la in states], linear)

    def as_cache(self, new_tokens: int = 1) -> DynamicCache:
        """A transformers cache over these tensors: a decode step appends to the attention
        buffers and overwrites the linear states in place."""
        attn = iter(self.attn.as_cache(new_tokens).layers)
        linear = iter(zip(self.conv, self.state, strict=True))
        cache = DynamicCache()
        cache.layers = [_state_layer(*next(linear)) if lin else next(attn) for lin in self.linear]
        return cache

    def after_step(self) -> HybridKV:
        """The state after a one-token decode step for every row (the linear states were
        written in place by the step)."""
        return HybridKV(self.attn.after_step(), self.conv, self.state, self.linear)

    def select(self, index: torch.Tensor) -> HybridKV | None:
        """Keep the rows in ``index`` (in that order); None when no row is left."""
        attn = self.attn.select(index)
        if attn is None:
            return None
        if attn is self.attn:
            return self
        pick = lambda ts: [t.index_select(0, index) for t in ts]  # noqa: E731
        return HybridKV(attn, pick(self.conv), pick(self.state), self.linear)

    def repeat(self, counts: torch.Tensor) -> HybridKV:
        """Repeat row ``r`` ``counts[r]`` times (n completions share one prefill)."""
        if bool((counts == 1).all()):
            return self
        rep = lambda ts: [t.repeat_interleave(counts, dim=0) for t in ts]  # noqa: E731
        return HybridKV(self.attn.repeat(counts), rep(self.conv), rep(self.state), self.linear)

    def join(self, other: HybridKV | None) -> HybridKV:
        """Rows of ``self`` followed by the rows of ``other``."""
        if other is None:
            return self
        cat = lambda a, b: [torch.cat([x, y]) for x, y in zip(a, b, strict=True)]  # noqa: E731
        return HybridKV(
            self.attn.join(other.attn), cat(self.conv, other.conv), cat(self.state, other.state), self.linear
        )


def _state_layer(conv: torch.Tensor, state: torch.Tensor) -> LinearAttentionLayer:
    """A transformers linear-attention cache layer that already holds ``conv``/``state``
    (what its lazy initialisation and first update would have set up)."""
    layer = LinearAttentionLayer()
    layer.conv_states[0], layer.recurrent_states[0] = conv, state
    layer.conv_kernel_size[0] = conv.shape[-1]
    layer.is_conv_states_initialized[0] = layer.is_recurrent_states_initialized[0] = True
    layer.has_previous_state[0] = True
    layer.dtype, layer.device = conv.dtype, conv.device
    return layer
