"""``attn_implementation="prl_sdpa"``: SDPA that lets grouped-query heads share K/V.

transformers' own ``sdpa`` path copies every cached key and value ``heads / kv_heads`` times
(``repeat_kv``) whenever an attention mask is present, and a continuous batch always has
one (rows are padded). Passing ``enable_gqa=True`` to
``torch.nn.functional.scaled_dot_product_attention`` computes the same attention without
that copy. Masks are transformers' boolean SDPA masks (True = attend).
"""

from __future__ import annotations

import torch.nn.functional as F

NAME = "prl_sdpa"


def prl_sdpa_forward(
    module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, is_causal=None, **kwargs
):
    if attention_mask is not None and attention_mask.dim() == 4:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
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
