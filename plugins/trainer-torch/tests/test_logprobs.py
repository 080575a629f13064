"""Chunked log-probabilities match the full-logit computation; packing isolates documents."""

from __future__ import annotations

import torch
from prl_trainer_torch import logprobs
from prl_trainer_torch.logprobs import chunked_logprobs
from prl_trainer_torch.model import Dist, load_hf_model, parallelize


def _check_against_full_softmax(dtype, tol):
    torch.manual_seed(0)
    # Logits of a few units, as in a trained model (huge ones make fp32 rounding dominate).
    h = (0.3 * torch.randn(2, 37, 16)).to(dtype).requires_grad_()
    w = torch.randn(50, 16, dtype=dtype, requires_grad=True)
    y = torch.randint(0, 50, (2, 37))
    temp = torch.rand(2, 37) + 0.5
    # Different upstream weights per token and per output exercise both gradient terms.
    c_lp, c_ent = torch.randn(2, 37), torch.randn(2, 37)
    logp, ent = chunked_logprobs(h, w, y, temp, chunk_size=8, entropy=True)
    ((logp * c_lp).sum() + (ent * c_ent).sum()).backward()
    g_h, g_w = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    full = torch.log_softmax((h @ w.t()).float() / temp.unsqueeze(-1), -1)
    ref = full.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    ref_ent = -(full.exp() * full).sum(-1)
    ((ref * c_lp).sum() + (ref_ent * c_ent).sum()).backward()
    for got, want in ((logp, ref), (ent, ref_ent), (g_h, h.grad), (g_w, w.grad)):
        torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    assert g_w.dtype == dtype and logp.dtype == torch.float32


def test_chunked_matches_full_softmax_values_and_grads():
    _check_against_full_softmax(torch.float32, 1e-4)
    _check_against_full_softmax(torch.bfloat16, 2e-2)


def test_compiled_chunk_kernels_match(monkeypatch):
    monkeypatch.setattr(logprobs, "_KERNELS", dict(logprobs._KERNELS))
    logprobs.compile_chunks()
    _check_against_full_softmax(torch.float32, 1e-4)


def test_compiling_routes_both_chunk_kernels_through_torch_compile(monkeypatch):
    # What compile_chunks hands to torch.compile, without paying for a compile: a stand-in
    # that counts the calls of each kernel it was given (the real one is checked above, in
    # the full tier).
    calls = {}

    def fake_compile(fn):
        def compiled(*args):
            calls[fn.__name__] = calls.get(fn.__name__, 0) + 1
            return fn(*args)

        return compiled

    monkeypatch.setattr(logprobs, "_KERNELS", dict(logprobs._KERNELS))
    monkeypatch.setattr(logprobs.torch, "compile", fake_compile)
    logprobs.compile_chunks()
    _check_against_full_softmax(torch.float32, 1e-4)
    assert calls == {"_chunk_forward": 10, "_chunk_grad": 10}  # 2 x 37 tokens in chunks of 8


def test_without_entropy_returns_zeros_and_logp_grads_only():
    torch.manual_seed(0)
    h = torch.randn(9, 8, requires_grad=True)
    w = torch.randn(20, 8)
    y = torch.randint(0, 20, (9,))
    logp, ent = chunked_logprobs(h, w, y, 0.7, chunk_size=4)
    assert torch.count_nonzero(ent) == 0
    logp.sum().backward()
    ref = torch.log_softmax(h @ w.t() / 0.7, -1).gather(-1, y[:, None]).squeeze(-1)
    g = torch.autograd.grad(ref.sum(), h)[0]
    torch.testing.assert_close(h.grad, g, atol=1e-5, rtol=1e-5)


def test_kernels_see_one_chunk_of_logits_at_a_time(monkeypatch):
    # The point of chunking: never more than chunk_size x V logits alive, forward or backward.
    seen = {"forward": [], "grad": []}
    kernels = dict(logprobs._KERNELS)
    for name, kernel in kernels.items():
        monkeypatch.setitem(
            logprobs._KERNELS, name, lambda logits, *a, k=kernel, n=name: seen[n].append(len(logits)) or k(logits, *a)
        )
    h = torch.randn(9, 8, requires_grad=True)
    w = torch.randn(20, 8, requires_grad=True)
    y = torch.randint(0, 20, (9,))
    logp, _ = chunked_logprobs(h, w, y, 0.7, chunk_size=4)
    logp.sum().backward()
    assert seen == {"forward": [4, 4, 1], "grad": [4, 4, 1]}
    ref = torch.log_softmax(h @ w.t() / 0.7, -1).gather(-1, y[:, None]).squeeze(-1)
    torch.testing.assert_close(logp, ref)


def test_default_temperature_is_one():
    torch.manual_seed(0)
    h, w, y = torch.randn(5, 8), torch.randn(20, 8), torch.randint(0, 20, (5,))
    logp, _ = chunked_logprobs(h, w, y)
    torch.testing.assert_close(logp, torch.log_softmax(h @ w.t(), -1).gather(-1, y[:, None]).squeeze(-1))


def test_outputs_and_gradients_stay_on_the_models_device(monkeypatch):
    # The meta device stands in for a GPU: every buffer must follow the inputs' device.
    # (Meta kernels accept CPU operands, so the arguments of each chunk kernel are checked.)
    meta = torch.device("meta")
    devices = set()
    for name, kernel in dict(logprobs._KERNELS).items():
        monkeypatch.setitem(logprobs._KERNELS, name, lambda *a, k=kernel: devices.update(t.device for t in a) or k(*a))
    h = torch.randn(9, 8, device=meta, requires_grad=True)
    w = torch.randn(20, 8, device=meta, requires_grad=True)
    y = torch.zeros(9, dtype=torch.long, device=meta)
    for temperature in (0.7, torch.full((9,), 0.7, device=meta)):
        logp, ent = chunked_logprobs(h, w, y, temperature, chunk_size=4, entropy=True)
        (logp.sum() + ent.sum()).backward()
        assert {t.device for t in (logp, ent, h.grad, w.grad)} == {meta} and devices == {meta}
        assert logp.dtype == torch.float32 and w.grad.dtype == torch.float32


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
