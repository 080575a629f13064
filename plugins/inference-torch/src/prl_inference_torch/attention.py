"""``attn_implementation="prl_sdpa"``: SDPA that lets grouped-query heads share K/V.

transformers' own ``sdpa`` path copies every cached key and value ``heads / kv_heads`` times
(``repeat_kv``) whenever an attention mask is present, and a continuous batch always has
one (rows are padded). Passing ``enable_gqa=True`` to
``torch.nn.functional.scaled_dot_product_attention`` computes the same attention without
that copy on the CPU. On CUDA, SDPA has no fused kernel for ``enable_gqa`` with a mask and
falls back to its math path, which upcasts to float32 and repeats K/V itself (most of a
decode step's time); there the query heads that share a K/V head are folded into the query
length instead (``[b, kv, group * q, d]``), which the memory-efficient kernel runs with the
mask and reads each cached key and value once. Masks are transformers' boolean SDPA masks
(True = attend).
"""

from __future__ import annotations

import torch.nn.functional as F

NAME = "prl_sdpa"


def folded_gqa_attention(query, key, value, mask, scale=None):
    """Attention of ``query`` [b, H, q, d] over ``key``/``value`` [b, KV, L, d] (H a multiple
    of KV, head ``h`` reading K/V head ``h // (H // KV)``) with a boolean ``mask``
    [b or 1, 1, q, L], computed as [b, KV, (H // KV) * q, d] queries so no K/V is repeated.
    Returns [b, H, q, d]."""
    b, heads, q, d = query.shape
    kv = key.shape[1]
    group = heads // kv
    folded = query.reshape(b, kv, group * q, d)
    # query row (j, t) of K/V head i is head i * group + j at position t: it takes mask row t
    m = mask.expand(mask.shape[0], 1, q, mask.shape[-1])
    m = m[:, :, None].expand(-1, -1, group, -1, -1).reshape(mask.shape[0], 1, group * q, mask.shape[-1])
    out = F.scaled_dot_product_attention(folded, key, value, attn_mask=m, scale=scale)
    return out.reshape(b, heads, q, d)


def prl_sdpa_forward(
    module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, is_causal=None, **kwargs
):
    if attention_mask is not None and attention_mask.dim() == 4:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
    if query.is_cuda and attention_mask is not None and query.shape[1] != key.shape[1]:
        return folded_gqa_attention(query, key, value, attention_mask, scaling).transpose(1, 2).contiguous(), None
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    causal = bool(is_causal) and attention_mask is None and query.shape[2] > 1
    out = F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=0.0,
        scale=scaling,
        is_causal=causal,
        enable_gqa=query.shape[1] != key.shape[1],
    )
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Register the function (and transformers' SDPA mask format for it); returns its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, prl_sdpa_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    return NAME
