"""The embedded engine serving a Qwen3.5 hybrid model (Gated DeltaNet + full attention):
continuous batching carries each row's linear-attention state, so staggered, left-padded,
repeated (n > 1) and joined rows all sample from the logprobs a lone forward gives."""

from __future__ import annotations

import threading

import pytest
import torch
from prl_inference_torch.engine import GenParams, Request
from prl_inference_torch.hybrid_kv import HybridKV, cache_class
from prl_inference_torch.kv import BatchKV
from prl_inference_torch.loading import load_state

from prl.config.components import InferenceConfig
from prl.config.errors import ConfigError
from prl.testing.inference_contract import reference, reference_logprobs


@pytest.fixture(scope="module")
def hybrid_model(tmp_path_factory) -> str:
    from prl_model_init import make_model

    return str(make_model(tmp_path_factory.mktemp("models") / "tiny-qwen3.5", preset="tiny-qwen3.5", seed=0))


@pytest.fixture(scope="module")
def state(hybrid_model):
    backend = {"type": "torch", "device": "cpu", "max_batch_size": 3, "num_threads": 1}
    st = load_state(InferenceConfig.model_validate({"model": {"name": hybrid_model}, "backend": backend}), None)
    yield st
    st.engine.shutdown()


def _wait(req: Request, timeout: float = 120) -> None:
    done = threading.Event()
    req.wake = lambda: done.set() if req.done else None
    if not req.done:
        assert done.wait(timeout)


def test_staggered_rows_match_a_lone_forward(state, hybrid_model):
    model, tok = reference(hybrid_model)
    assert state.engine._cache_cls is HybridKV
    reqs = []
    for i in range(7):
        # Prompts of different lengths share prefills (left padding); n = 2 repeats a row.
        prompt = tok.encode("count " * (1 + i % 3) + str(i), add_special_tokens=False)
        req = Request(prompt, GenParams(max_tokens=6 + 3 * (i % 3), seed=i, n=1 + i % 2, ignore_eos=True))
        state.engine.submit(req)
        reqs.append(req)
        if i % 2:
            _wait(reqs[i - 1])  # later requests join while earlier ones decode
    for req in reqs:
        _wait(req)
        assert req.error is None
        for comp in req.completions:
            assert len(comp.token_ids) == req.params.max_tokens
            want = reference_logprobs(model, req.prompt_ids + comp.token_ids)[len(req.prompt_ids) - 1 :]
            assert max(abs(a - b) for a, b in zip(comp.logprobs, want, strict=True)) < 1e-4


def test_greedy_decode_equals_transformers_generate(state, hybrid_model):
    model, tok = reference(hybrid_model)
    prompts = [tok.encode(t, add_special_tokens=False) for t in ("a", "hello world", "the quick brown fox")]
    reqs = [Request(p, GenParams(max_tokens=10, temperature=0.0, ignore_eos=True)) for p in prompts]
    for r in reqs:
        state.engine.submit(r)
    for r, p in zip(reqs, prompts, strict=True):
        _wait(r)
        with torch.no_grad():
            want = model.generate(torch.tensor([p]), max_new_tokens=10, do_sample=False, pad_token_id=0)[0, len(p) :]
        assert r.completions[0].token_ids == want.tolist()


def test_cache_class_by_layer_kinds(state):
    assert cache_class(state.engine.model.config) is HybridKV
    dense = type("Cfg", (), {"layer_types": ["full_attention"] * 2, "model_type": "qwen3"})()
    assert cache_class(dense) is BatchKV
    odd = type("Cfg", (), {"layer_types": ["linear_attention", "conv"], "model_type": "lfm2x"})()
    with pytest.raises(ConfigError) as err:
        cache_class(odd)
    assert "\n" not in str(err.value) and "lfm2x" in str(err.value) and "conv" in str(err.value)


def test_an_adapter_on_gated_deltanet_and_attention_samples_from_the_merged_model(state, hybrid_model):
    """A LoRA adapter on the linear-attention projections (in_proj_qkv, out_proj) and on the
    full-attention q_proj: its rows decode as the model with the adapter merged in, and a row
    without it, in the same batch, as the base model."""
    import copy

    model, tok = reference(hybrid_model)
    g = torch.Generator().manual_seed(3)
    adapter = {}
    for name, mod in state.engine.model.named_modules():
        if name.endswith(("linear_attn.in_proj_qkv", "linear_attn.out_proj", "self_attn.q_proj")):
            a = torch.randn(4, mod.in_features, generator=g) * 0.3
            b = torch.randn(mod.out_features, 4, generator=g) * 0.3
            adapter[name] = (a, b, 2.0)
    assert {n.split(".")[-2] for n in adapter} == {"linear_attn", "self_attn"}
    state.engine.lora.load("hybrid-adapter", adapter)  # the engine is idle between tests
    merged = copy.deepcopy(model)
    with torch.no_grad():
        for name, (a, b, scale) in adapter.items():
            merged.get_submodule(name).weight += scale * b @ a
    prompt = tok.encode("the quick brown fox", add_special_tokens=False)
    params = GenParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    adapted, plain = (Request(prompt, params, adapter=x) for x in ("hybrid-adapter", None))
    for r in (adapted, plain):
        state.engine.submit(r)
    for r, ref in ((adapted, merged), (plain, model)):
        _wait(r)
        assert r.error is None
        with torch.no_grad():
            want = ref.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, pad_token_id=0)
        got = r.completions[0]
        assert got.token_ids == want[0, len(prompt) :].tolist()
        lps = reference_logprobs(ref, prompt + got.token_ids)[len(prompt) - 1 :]
        assert max(abs(x - y) for x, y in zip(got.logprobs, lps, strict=True)) < 1e-4
    assert adapted.completions[0].token_ids != plain.completions[0].token_ids  # the adapter mattered
