"""Chunked log-probabilities match the full-logit computation; packing isolates documents."""

from __future__ import annotations

import torch

from prl_trainer_torch.logprobs import chunked_logprobs
from prl_trainer_torch.model import Dist, load_hf_model, parallelize


def test_chunked_matches_full_softmax_values_and_grads():
    torch.manual_seed(0)
    h = torch.randn(2, 37, 16, requires_grad=True)
    w = torch.randn(50, 16, requires_grad=True)
    y = torch.randint(0, 50, (2, 37))
    temp = torch.rand(2, 37) + 0.5
    logp, ent = chunked_logprobs(h, w, y, temp, chunk_size=8, entropy=True)
    (logp.sum() + ent.sum()).backward()
    g_h, g_w = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    full = torch.log_softmax((h @ w.t()) / temp.unsqueeze(-1), -1)
    ref = full.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    ref_ent = -(full.exp() * full).sum(-1)
    (ref.sum() + ref_ent.sum()).backward()
    torch.testing.assert_close(logp, ref)
    torch.testing.assert_close(ent, ref_ent)
    torch.testing.assert_close(g_h, h.grad)
    torch.testing.assert_close(g_w, w.grad)


def test_packed_documents_do_not_attend_to_each_other(tiny_model):
    hf = load_hf_model(str(tiny_model), torch.float32, "sdpa")
    policy = parallelize(hf, Dist(0, 1, 0, torch.device("cpu")), activation_checkpointing=False)
    torch.manual_seed(1)
    a, b = torch.randint(0, 256, (1, 11)), torch.randint(0, 256, (1, 7))
    ids = torch.cat([a, b], 1)
    pos = torch.cat([torch.arange(11), torch.arange(7)]).unsqueeze(0)
    packed, _ = policy(ids, pos, ids)
    alone_b, _ = policy(b, torch.arange(7).unsqueeze(0), b)
    alone_a, _ = policy(a, torch.arange(11).unsqueeze(0), a)
    torch.testing.assert_close(packed[:, 11:], alone_b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(packed[:, :11], alone_a, atol=1e-5, rtol=1e-5)
