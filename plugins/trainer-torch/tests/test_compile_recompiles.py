"""Compiled decoder layers recompile at most within the first rows, never later (issue #16:
one recompile at step 5 of a compiled `prl sft` on an H200).

The cause: packed rows differ in length, document count and longest document. Compiled
static, each of those recompiled the first time it changed, and the document count could
stay the same for several rows (the dynamic mark was set on a tensor that was then copied).
The layers now compile with dynamic shapes from the start.

The GPU attention path (``prl_varlen``) is exercised on CPU through a stand-in for torch's
``varlen_attn``: a custom op, opaque to dynamo as the CUDA kernel is, taking the same
cumulative document bounds and longest-document int.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.slow


@torch.library.custom_op("prl_test::varlen_attn", mutates_args=())
def _varlen_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, max_len: int) -> torch.Tensor:
    out = torch.empty_like(q)
    bounds = cu.tolist()
    for s, e in zip(bounds[:-1], bounds[1:], strict=False):
        qq, kk, vv = (t[s:e].transpose(0, 1) for t in (q, k, v))
        attn = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=True, enable_gqa=True)
        out[s:e] = attn.transpose(0, 1)
    return out


@_varlen_op.register_fake
def _(q, k, v, cu, max_len):
    return torch.empty_like(q)


@torch.library.custom_op("prl_test::varlen_attn_bwd", mutates_args=())
def _varlen_bwd(
    g: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # causal attention's backward per document, by hand: autograd is off inside an op
    gq, gk, gv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    rep, heads, scale = q.shape[1] // k.shape[1], k.shape[1], q.shape[-1] ** -0.5
    bounds = cu.tolist()
    for s, e in zip(bounds[:-1], bounds[1:], strict=False):
        n = e - s
        qq, go = q[s:e].transpose(0, 1), g[s:e].transpose(0, 1)
        kk, vv = (t[s:e].transpose(0, 1).repeat_interleave(rep, 0) for t in (k, v))
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        p = (qq @ kk.transpose(1, 2) * scale).masked_fill(~causal, float("-inf")).softmax(-1)
        dp = go @ vv.transpose(1, 2)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        gq[s:e] = (ds @ kk * scale).transpose(0, 1)
        gk[s:e] = (ds.transpose(1, 2) @ qq * scale).reshape(heads, rep, n, -1).sum(1).transpose(0, 1)
        gv[s:e] = (p.transpose(1, 2) @ go).reshape(heads, rep, n, -1).sum(1).transpose(0, 1)
    return gq, gk, gv


@_varlen_bwd.register_fake
def _(g, q, k, v, cu):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:4])


def _backward(ctx, g):
    q, k, v, cu = ctx.saved_tensors
    return (*_varlen_bwd(g, q, k, v, cu), None, None)


_varlen_op.register_autograd(_backward, setup_context=_setup)


def cpu_varlen_attn(
    query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None, window_size=(-1, -1), enable_gqa=False
):
    return _varlen_op(query, key, value, cu_seq_q, max_q)


# Rows as document lengths. The first two share a document count and longest document
# (so a static compile would keep both fixed); later rows change each, including a single
# document as long as the row. All stay under ~680 tokens: above that CPU inductor adds a
# guard of its own (a C++ accumulator choice) that a GPU never sees.
ROWS = [[100, 200], [120, 200], [300], [50, 60, 70, 80], [2, 1, 250], [64, 64], [333, 7]]


def test_compiled_layers_do_not_recompile_after_the_first_rows(monkeypatch, tiny_model):
    import torch._dynamo.utils as dynamo_utils
    from prl_trainer_torch import attention, logprobs
    from prl_trainer_torch.model import Dist, load_hf_model, parallelize

    # compile=True swaps the process-wide log-prob kernels for compiled ones: put the eager
    # ones back afterwards, or later tests in this process (a meta-device check, one-worker
    # runs compared with eager torchrun workers) would run compiled kernels.
    for name, kernel in list(logprobs._KERNELS.items()):
        monkeypatch.setitem(logprobs._KERNELS, name, kernel)
    monkeypatch.setattr(attention, "_varlen", lambda: cpu_varlen_attn)
    monkeypatch.setattr(attention, "varlen_available", lambda device: True)
    torch._dynamo.reset()
    torch.manual_seed(0)
    hf = load_hf_model(str(tiny_model), torch.float32, attention.NAME)
    policy = parallelize(hf, Dist(0, 1, 0, torch.device("cpu")), activation_checkpointing=False, compile=True)
    graphs = []
    for docs in ROWS:
        pos = torch.cat([torch.arange(n) for n in docs]).unsqueeze(0)
        ids = torch.randint(0, hf.config.vocab_size, pos.shape)
        logp, _ = policy(ids, pos, ids)
        logp.sum().backward()
        assert torch.isfinite(logp).all()
        graphs.append(dynamo_utils.counters["stats"]["unique_graphs"])
    # the log-prob chunk kernels compile a dynamic variant at the second row (by design);
    # from then on nothing compiles, whatever the rows' shapes
    assert graphs[1] == graphs[-1], f"graphs compiled per row: {graphs}"
