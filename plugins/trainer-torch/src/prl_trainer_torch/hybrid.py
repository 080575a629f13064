"""Packed rows through Qwen3.5's Gated DeltaNet layers, the state reset at every document.

A Qwen3.5 text model mixes full-attention layers with Gated DeltaNet ("linear attention")
layers. A DeltaNet layer carries two states along the sequence: a short causal convolution
(its last ``kernel - 1`` inputs) and a recurrent matrix per head. transformers' layer runs
the whole row as one sequence: its torch kernels take ``cu_seqlens`` and drop it, so in a
packed row (several documents, position ids restarting at 0) the second document starts
from the first one's states. The full-attention layers do not leak (their mask is built
from the position ids), so the error is confined to the linear layers, but it changes the
logprobs of every document after the first (by ~0.4 in logits on the random tiny model).

:func:`install` replaces the forward of each DeltaNet module of a model with one that,
given the documents' cumulative lengths (``cu_seq_lens_q``, which ``PolicyModel`` passes
for such models), runs each document from zero state:

* **torch path** (CPU, or no flash-linear-attention): the packed tokens are scattered into
  a ``[documents, longest, ...]`` batch, right-padded with zeros, and the model's own
  convolution and chunked delta-rule functions run on it. Right padding cannot reach
  earlier positions of a causal recurrence, and a zero-state start is exactly what a
  document run alone gets, so the result equals running each document by itself. The cost
  is the padding: documents x longest positions instead of the row's length.
* **fla path** (CUDA, bf16/fp16, ``fla`` importable): flash-linear-attention's varlen
  kernels (``causal_conv1d`` and ``chunk_gated_delta_rule`` with ``cu_seqlens``) on the
  flattened row, no padding. Not exercised by the CPU tests.

Without ``cu_seq_lens_q`` (generation, a plain ``model(...)`` call) or with a cache the
stock forward runs unchanged. A model that declares linear-attention layers of another
shape (Qwen3-Next's fused projections, ...) is refused with one line rather than trained
with leaking state.
"""

from __future__ import annotations

import functools
import sys

import torch
import torch.nn.functional as F
from torch import nn

from prl.config.errors import ConfigError

LINEAR = "linear_attention"
# Attention kwargs PolicyModel passes: the names transformers' own varlen paths read.
CU = "cu_seq_lens_q"
LONGEST = "max_length_q"
# What a Gated DeltaNet module of the Qwen3.5 layout has (separate qkv / z / b / a
# projections); Qwen3-Next's fused in_proj_qkvz is another layout.
_PARTS = ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "conv1d", "A_log", "dt_bias", "norm", "out_proj")


class HybridModelError(ConfigError, ValueError):
    """A model with linear-attention layers this module cannot reset per document: one line,
    exit 2, like a config error (the model named in ``model.name`` is the thing to change)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "Model error")


def declares_linear_attention(config) -> bool:
    """Whether a transformers config has linear-attention layers."""
    return LINEAR in (getattr(config, "layer_types", None) or [])


def delta_net_modules(model: nn.Module) -> list[nn.Module]:
    """The Gated DeltaNet modules (Qwen3.5 layout) of a model, in layer order."""
    return [m for m in model.modules() if all(hasattr(m, part) for part in _PARTS)]


def install(model: nn.Module) -> bool:
    """Make every Gated DeltaNet module of ``model`` reset its states at document bounds
    (see the module docstring). Idempotent. True when the model has such modules.

    Raises:
        HybridModelError: the config declares linear-attention layers but none is of the
            Qwen3.5 layout.
    """
    modules = delta_net_modules(model)
    config = getattr(model, "config", None)
    if not modules:
        if config is not None and declares_linear_attention(config):
            kind = getattr(config, "model_type", type(model).__name__)
            raise HybridModelError(
                f"model type {kind} has linear-attention layers that prl cannot reset at packed "
                "document boundaries (supported: Qwen3.5 / Qwen3.5-MoE Gated DeltaNet)"
            )
        return False
    for mod in modules:
        if not getattr(mod, "_prl_packed", False):
            _wrap(mod)
    return True


def _wrap(mod: nn.Module) -> None:
    stock = mod.forward

    def forward(hidden_states, cache_params=None, attention_mask=None, **kwargs):
        cu = kwargs.get(CU)
        if cu is None or cache_params is not None:
            return stock(hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs)
        return packed_forward(mod, hidden_states, cu, kwargs.get(LONGEST), attention_mask)

    mod.forward = forward
    mod._prl_packed = True


def packed_forward(
    mod: nn.Module,
    hidden_states: torch.Tensor,
    cu: torch.Tensor,
    longest: int | None = None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """One Gated DeltaNet layer over packed rows ``[B, T, hidden]`` whose flattened tokens
    form the documents ``cu`` (cumulative lengths from 0, as :func:`document_bounds` gives
    them), each starting from zero convolution and recurrent state. The projections, gates
    and output norm are the stock layer's, in its order."""
    if attention_mask is not None and attention_mask.ndim == 2:
        # Padding positions carry nothing into the states, as in the stock layer.
        hidden_states = (hidden_states * attention_mask[:, :, None]).to(hidden_states.dtype)
    b, t, _ = hidden_states.shape
    qkv = mod.in_proj_qkv(hidden_states)
    z = mod.in_proj_z(hidden_states)
    beta = mod.in_proj_b(hidden_states).sigmoid()
    # float32 here as in the stock layer: in half precision exp(A_log) can overflow.
    g = -mod.A_log.float().exp() * F.softplus(mod.in_proj_a(hidden_states).float() + mod.dt_bias)
    kernels = _fla_kernels() if qkv.is_cuda and qkv.dtype in (torch.bfloat16, torch.float16) else None
    if kernels is not None:
        core = _mix_fla(mod, kernels, qkv, g, beta, cu)
    else:
        core = _mix_padded(mod, qkv, g, beta, cu, longest)
    core = mod.norm(core.reshape(-1, mod.head_v_dim), z.reshape(-1, mod.head_v_dim))
    return mod.out_proj(core.reshape(b, t, -1))


def _heads(mod: nn.Module, mixed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Convolved ``[..., L, key*2 + value]`` channels as query, key, value heads; query and
    key heads repeated to the value head count, as the stock layer does."""
    lead = mixed.shape[:-1]
    q, k, v = torch.split(mixed, [mod.key_dim, mod.key_dim, mod.value_dim], dim=-1)
    q = q.reshape(*lead, -1, mod.head_k_dim)
    k = k.reshape(*lead, -1, mod.head_k_dim)
    v = v.reshape(*lead, -1, mod.head_v_dim)
    rep = mod.num_v_heads // mod.num_k_heads
    if rep > 1:
        q, k = q.repeat_interleave(rep, dim=-2), k.repeat_interleave(rep, dim=-2)
    return q, k, v


def _mix_padded(mod, qkv, g, beta, cu, longest) -> torch.Tensor:
    """Convolution and delta rule per document, the documents as a right-padded batch."""
    b, t, _ = qkv.shape
    n = b * t
    cu = cu.to(device=qkv.device, dtype=torch.long)
    docs = cu.numel() - 1
    if longest is None:
        longest = int((cu[1:] - cu[:-1]).max())
    token = torch.arange(n, device=qkv.device)
    doc = torch.searchsorted(cu[1:], token, right=True)
    where = (doc, token - cu[doc])

    def padded(x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(n, *x.shape[2:])
        return flat.new_zeros(docs, longest, *flat.shape[1:]).index_put(where, flat)

    fns = sys.modules[type(mod).__module__]
    weight = mod.conv1d.weight.squeeze(1)
    mixed = fns.causal_conv1d_fn(padded(qkv).transpose(1, 2), weight, mod.conv1d.bias, activation=mod.activation)
    q, k, v = _heads(mod, mixed.transpose(1, 2))
    out, _ = fns.torch_chunk_gated_delta_rule(
        q,
        k,
        v,
        g=padded(g),
        beta=padded(beta),
        initial_state=None,
        output_final_state=False,
        use_qk_l2norm_in_kernel=True,
    )
    return out[where].reshape(b, t, -1, mod.head_v_dim)


@functools.cache
def _fla_kernels():
    """flash-linear-attention's varlen convolution and chunked delta rule, or None."""
    try:
        from fla.modules.convolution import causal_conv1d
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except ImportError:
        return None
    return causal_conv1d, chunk_gated_delta_rule


def _mix_fla(mod, kernels, qkv, g, beta, cu) -> torch.Tensor:
    """The fla branch (GPU only, not run by the CPU tests): the rows flattened into one
    sequence of ``B*T`` tokens and ``cu`` handed to both kernels, which start each document
    from zero state themselves."""
    conv, rule = kernels
    b, t, c = qkv.shape
    cu = cu.to(device=qkv.device, dtype=torch.long)
    weight = mod.conv1d.weight.squeeze(1)
    mixed = conv(
        x=qkv.reshape(1, b * t, c), weight=weight, bias=mod.conv1d.bias, activation=mod.activation, cu_seqlens=cu
    )
    # fla's causal_conv1d returns (output, final state); older releases the output alone.
    mixed = mixed[0] if isinstance(mixed, tuple) else mixed
    q, k, v = _heads(mod, mixed)
    out, _ = rule(
        q, k, v, g=g.reshape(1, b * t, -1), beta=beta.reshape(1, b * t, -1), use_qk_l2norm_in_kernel=True, cu_seqlens=cu
    )
    return out.reshape(b, t, -1, mod.head_v_dim)
