"""The CUDA attention path folds the query heads sharing a K/V head into the query length;
it must equal grouped-query SDPA with the same boolean mask (checked here on the CPU)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from prl_inference_torch.attention import folded_gqa_attention


@pytest.mark.parametrize("q_len", [1, 5])
@pytest.mark.parametrize("mask_batch", [1, 3])
def test_folded_heads_equal_grouped_query_attention(q_len, mask_batch):
    torch.manual_seed(0)
    b, heads, kv, length, d = 3, 8, 2, 11, 16
    query = torch.randn(b, heads, q_len, d)
    key, value = torch.randn(b, kv, length, d), torch.randn(b, kv, length, d)
    # left padding that differs per row, and causal within the last q_len columns
    cols = torch.arange(length)
    pads = torch.tensor([0, 3, 6])[:mask_batch]
    rows = torch.arange(length - q_len, length)
    mask = (cols[None, None, :] >= pads[:, None, None]) & (cols[None, None, :] <= rows[None, :, None])
    mask = mask[:, None]  # [mask_batch, 1, q, L]
    want = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True, scale=0.3)
    got = folded_gqa_attention(query, key, value, mask, scale=0.3)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_heads_read_their_own_kv_head():
    # K/V head 1 holds different values: a head mapped to the wrong K/V head would see them
    b, heads, kv, length, d = 1, 4, 2, 4, 8
    query = torch.zeros(b, heads, 1, d)
    key = torch.zeros(b, kv, length, d)
    value = torch.stack([torch.zeros(length, d), torch.ones(length, d)])[None]
    mask = torch.ones(1, 1, 1, length, dtype=torch.bool)
    out = folded_gqa_attention(query, key, value, mask)
    assert out[0, :2].abs().max() == 0 and torch.equal(out[0, 2:], torch.ones(2, 1, d))
