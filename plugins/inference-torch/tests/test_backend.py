"""Behaviour specific to the torch backend: registration, binding rules, auth, batching, swaps."""

from __future__ import annotations

import math
import threading

import pytest
from prl_inference_torch.backend import TorchBackend, TorchInferenceConfig
from prl_inference_torch.engine import GenParams, Request
from prl_inference_torch.loading import load_state

from prl.config.components import InferenceConfig
from prl.plugins import get_registry
from prl.testing.inference_contract import reference, reference_logprobs


def test_registered_as_the_default_backend():
    assert get_registry().get("inference_backends", "torch") is TorchBackend
    cfg = InferenceConfig.model_validate({"backend": {"type": "torch", "device": "cpu", "max_batch_size": 4}})
    assert isinstance(cfg.backend, TorchInferenceConfig) and cfg.backend.max_batch_size == 4
    assert InferenceConfig.model_validate({}).backend.type == "torch"
    with pytest.raises(ValueError, match="max_batch_size"):
        InferenceConfig.model_validate({"backend": {"type": "torch", "max_batch_size": 0}})


def test_refuses_a_public_address_without_an_api_key(monkeypatch, tiny_model):
    monkeypatch.delenv("PRL_API_KEY", raising=False)
    cfg = InferenceConfig.model_validate({"model": {"name": tiny_model}, "server": {"host": "0.0.0.0", "port": 0}})
    with pytest.raises(SystemExit, match="api_key"):
        TorchBackend(cfg).serve()


@pytest.fixture(scope="module")
def state(tiny_model):
    backend = {"type": "torch", "device": "cpu", "max_batch_size": 3, "num_threads": 1}
    cfg = InferenceConfig.model_validate({"model": {"name": tiny_model}, "backend": backend})
    st = load_state(cfg, api_key="sekret")
    yield st
    st.engine.shutdown()


def _wait(req: Request, timeout: float = 60) -> None:
    done = threading.Event()
    req.wake = lambda: done.set() if req.done else None
    if not req.done:
        assert done.wait(timeout)


def test_admin_routes_need_the_bearer_key(state):
    from fastapi.testclient import TestClient
    from prl_inference_torch.server import build_app

    with TestClient(build_app(state)) as http:
        assert http.post("/pause").status_code == 401
        assert http.post("/pause", headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = {"Authorization": "Bearer sekret"}
        assert http.post("/pause", headers=ok).json() == {"status": "paused"}
        assert http.post("/resume", headers=ok).json() == {"status": "resumed"}
        assert http.get("/health").status_code == 200  # reads stay open


def test_rows_joining_a_running_batch_get_correct_logprobs(state, tiny_model):
    """Staggered requests on a 3-row batch: each joins mid-flight and still matches a lone forward."""
    model, tok = reference(tiny_model)
    engine = state.engine
    reqs = []
    for i in range(7):
        prompt = tok.encode("join " * (1 + i % 3) + str(i), add_special_tokens=False)
        req = Request(prompt, GenParams(max_tokens=5 + 3 * (i % 3), seed=i, n=1 + i % 2, ignore_eos=True))
        engine.submit(req)
        reqs.append(req)
        if i % 2:
            _wait(reqs[i - 1])  # later requests arrive while earlier ones are decoding
    for req in reqs:
        _wait(req)
        assert len(req.completions) == req.params.n
        for comp in req.completions:
            assert len(comp.token_ids) == req.params.max_tokens
            want = reference_logprobs(model, req.prompt_ids + comp.token_ids)[len(req.prompt_ids) - 1 :]
            assert max(abs(a - b) for a, b in zip(comp.logprobs, want, strict=False)) < 1e-4


def test_weight_swap_waits_for_in_flight_requests(state):
    engine = state.engine
    long = Request([1, 2, 3], GenParams(max_tokens=40, ignore_eos=True))
    engine.submit(long)
    while not long.completions[0].token_ids:  # the swap is requested once decoding has begun
        threading.Event().wait(0.005)
    seen = {}

    def swap():
        seen["long_done"] = long.done
        engine.version += 1
        return engine.version

    version = engine.call(swap, drain=True).result(timeout=60)
    after = Request([1, 2, 3], GenParams(max_tokens=2))
    engine.submit(after)
    _wait(after)
    assert seen["long_done"], "weights changed under a running request"
    assert [span[0] for span in long.completions[0].versions] == [version - 1]
    assert after.version == version


def test_cancelled_request_leaves_the_batch(state):
    engine = state.engine
    req = Request([5, 6, 7], GenParams(max_tokens=500, ignore_eos=True))
    engine.submit(req)
    while not req.completions[0].token_ids:
        threading.Event().wait(0.01)
    engine.cancel(req)
    _wait(req)
    assert req.completions[0].finish_reason == "abort"
    assert len(req.completions[0].token_ids) < 500


def test_stop_token_ids_and_eos(state):
    engine = state.engine
    first = Request([10, 11], GenParams(max_tokens=8, temperature=0.0, ignore_eos=True))
    engine.submit(first)
    _wait(first)
    target = first.completions[0].token_ids[3]
    stopped = Request([10, 11], GenParams(max_tokens=8, temperature=0.0, stop_token_ids=[target], ignore_eos=True))
    engine.submit(stopped)
    _wait(stopped)
    comp = stopped.completions[0]
    cut = first.completions[0].token_ids.index(target)
    assert comp.token_ids == first.completions[0].token_ids[: cut + 1]  # the stop token is kept
    assert comp.finish_reason == "stop" and comp.stop_reason == target


def test_top_k_one_is_greedy(state):
    engine = state.engine
    reqs = [
        Request([20, 21, 22], GenParams(max_tokens=6, temperature=0.0)),
        Request([20, 21, 22], GenParams(max_tokens=6, temperature=1.5, top_k=1, seed=9)),
        Request([20, 21, 22], GenParams(max_tokens=6, temperature=1.5, top_p=1e-6, seed=9)),
    ]
    for r in reqs:
        engine.submit(r)
    for r in reqs:
        _wait(r)
    greedy = reqs[0].completions[0].token_ids
    assert reqs[1].completions[0].token_ids[: len(greedy)] == greedy
    assert reqs[2].completions[0].token_ids[: len(greedy)] == greedy


def test_truncated_sampling_returns_its_mask(state):
    """top-k / top-p rows report, per token, the ids they could have sampled (sampling replay)."""
    engine = state.engine
    topk = Request([30, 31], GenParams(max_tokens=5, top_k=5, seed=1, ignore_eos=True))
    topp = Request([30, 31], GenParams(max_tokens=5, top_p=0.5, seed=1, ignore_eos=True))
    plain = Request([30, 31], GenParams(max_tokens=5, seed=1, ignore_eos=True))
    for r in (topk, topp, plain):
        engine.submit(r)
    for r in (topk, topp, plain):
        _wait(r)
    k, p = topk.completions[0], topp.completions[0]
    assert [len(m) for m in k.sampling_mask] == [5] * 5
    assert all(t in m for t, m in zip(k.token_ids, k.sampling_mask, strict=False))
    assert len(p.sampling_mask) == 5 and all(t in m for t, m in zip(p.token_ids, p.sampling_mask, strict=False))
    assert all(0 < len(m) < state.vocab_size for m in p.sampling_mask)
    assert plain.completions[0].sampling_mask == []
    # with each kept id, its untruncated logprob: the sampled token's is the one reported,
    # and the kept mass reaches top_p
    for comp in (k, p):
        assert [len(v) for v in comp.sampling_mask_logprobs] == [len(m) for m in comp.sampling_mask]
        for t, lp, ids, lps in zip(
            comp.token_ids, comp.logprobs, comp.sampling_mask, comp.sampling_mask_logprobs, strict=True
        ):
            assert lps[ids.index(t)] == pytest.approx(lp, abs=1e-5)
    assert all(sum(math.exp(v) for v in lps) >= 0.5 - 1e-6 for lps in p.sampling_mask_logprobs)
    assert plain.completions[0].sampling_mask_logprobs == []
