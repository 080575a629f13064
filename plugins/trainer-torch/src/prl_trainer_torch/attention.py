"""``attn_implementation="prl_varlen"``: packed rows through flash attention's varlen kernel.

A packed training row holds many documents. ``sdpa`` needs a dense block-diagonal mask
(seq_len^2 entries) and falls back to a slower kernel; ``flex_attention`` skips masked
blocks but still walks a block mask. torch's ``varlen_attn`` (torch >= 2.10, CUDA) runs
the flash-attention kernel over the documents directly, given their cumulative lengths,
so no mask exists at all and no work is spent on cross-document blocks.

``PolicyModel`` computes the cumulative lengths once per forward from the position ids
(``document_bounds``; the RL step hands it ``host_document_bounds`` made with the
micro-batch instead) and passes them down through transformers' attention kwargs
(``cu_seq_lens_q``/``max_length_q``, the names its own flash path uses), so the attention
calls of a step do not each synchronise with the GPU to rebuild them.

``resolve_attn("auto", device)`` picks ``prl_varlen`` where it can run and ``sdpa``
elsewhere (CPU, older torch).
"""

from __future__ import annotations

import inspect

import numpy as np
import torch

NAME = "prl_varlen"
_PARAMS: set[str] = set()  # varlen_attn's keyword names, read once (it changed across torch versions)


def _varlen():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def varlen_available(device: torch.device) -> bool:
    return device.type == "cuda" and _varlen() is not None


def resolve_attn(name: str, device: torch.device) -> str:
    """The transformers attention implementation to load the model with."""
    if name == "auto":
        name = NAME if varlen_available(device) else "sdpa"
    if name == NAME:
        if not varlen_available(device):
            raise ValueError(
                f"model.attn_implementation = '{NAME}' needs CUDA and torch >= 2.10 "
                f"(torch.nn.attention.varlen); use 'auto' or 'sdpa' here"
            )
        register()
    return name


def document_bounds(position_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Cumulative document lengths (int32, starting at 0) of the flattened packed rows, and
    the longest document (flash attention launches blocks for that many query positions
    per document: a loose bound such as the row length fills the grid with idle blocks)."""
    pos = position_ids.reshape(-1)
    starts = torch.nonzero(pos[1:] == 0).flatten() + 1
    bounds = torch.cat([starts.new_zeros(1), starts, starts.new_full((1,), pos.numel())])
    cu = bounds.to(torch.int32)
    # The number of documents changes from row to row. The mark goes on the tensor the
    # layers receive: marking ``bounds`` before the cast was lost with the copy, so the
    # count stayed static until a row with a new count forced a recompile.
    torch._dynamo.maybe_mark_dynamic(cu, 0)
    return cu, int((bounds[1:] - bounds[:-1]).max())


def host_bounds(position_ids) -> tuple[np.ndarray, int]:
    """:func:`document_bounds` of one packed row's position ids given on the host (a list
    or numpy array), as a numpy int32 array and the longest document."""
    pos = np.asarray(position_ids, dtype=np.int64).reshape(-1)
    bounds = np.concatenate([[0], np.flatnonzero(pos[1:] == 0) + 1, [pos.size]])
    return bounds.astype(np.int32), int(np.diff(bounds).max(initial=0))


def host_document_bounds(position_ids, device: torch.device) -> tuple[torch.Tensor, int]:
    """:func:`host_bounds` on ``device``: the same values as :func:`document_bounds`, found
    without asking the GPU. The trainer builds them with the micro-batch, so no forward
    pass waits for the previous backward to finish just to count documents."""
    bounds, longest = host_bounds(position_ids)
    cu = torch.from_numpy(bounds).to(device)
    torch._dynamo.maybe_mark_dynamic(cu, 0)
    return cu, longest


def _call_kwargs(params: set[str], scaling: float | None, head_dim: int, gqa: bool) -> dict:
    kwargs: dict = {}
    # torch 2.10 took is_causal; later versions a (left, right) window, (-1, 0) = causal.
    if "is_causal" in params:
        kwargs["is_causal"] = True
    else:
        kwargs["window_size"] = (-1, 0)
    if scaling is not None and abs(scaling - head_dim**-0.5) > 1e-12:
        if "scale" not in params:
            raise ValueError(f"this torch's varlen_attn has no scale argument (model wants {scaling})")
        kwargs["scale"] = scaling
    if gqa and "enable_gqa" in params:
        kwargs["enable_gqa"] = True
    return kwargs


def prl_varlen_forward(module, query, key, value, attention_mask, scaling=None, dropout: float = 0.0, **kwargs):
    """transformers attention function: query (B, H, T, D), key/value (B, H_kv, T, D)."""
    varlen_attn = _varlen()
    b, heads, t, d = query.shape
    cu, longest = kwargs.get("cu_seq_lens_q"), kwargs.get("max_length_q")
    if cu is None:
        cu, longest = document_bounds(kwargs["position_ids"])
    params = _PARAMS
    gqa = key.shape[1] != heads
    q = query.transpose(1, 2).reshape(b * t, heads, d)
    k = key.transpose(1, 2).reshape(b * t, key.shape[1], d)
    v = value.transpose(1, 2).reshape(b * t, value.shape[1], d)
    if gqa and "enable_gqa" not in params:
        k = k.repeat_interleave(heads // k.shape[1], dim=1)
        v = v.repeat_interleave(heads // v.shape[1], dim=1)
    out = varlen_attn(q, k, v, cu, cu, int(longest), int(longest), **_call_kwargs(params, scaling, d, gqa))
    return out.reshape(b, t, heads, d), None


def register() -> str:
    """Register the attention function. No mask builder is registered with it: for an
    implementation without one transformers builds no mask at all, while with one (even
    one returning nothing) it first scans the position ids for packed documents and reads
    the answer back from the GPU, a wait on every forward."""
    from transformers import AttentionInterface

    _PARAMS.update(inspect.signature(_varlen()).parameters)
    AttentionInterface.register(NAME, prl_varlen_forward)
    return NAME
