"""return_routed_experts (routing replay): the torch engine records, for every completion
token, the experts each MoE layer chose at the position that predicted it, the same a
transformers forward over the whole sequence chooses; the generate route returns them
(``routed_experts``, layers x top_k ids, flat) and prl's client hands them on."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch
from prl_inference_torch.engine import Engine, GenParams, Request
from prl_inference_torch.routes import RouteRecorder

from prl.client import InferenceHTTPClient
from prl.moe_routers import routers as model_routers
from prl.types import Sampling

LAYERS, TOP_K = 4, 2  # the tiny-moe preset


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory) -> str:
    from prl_model_init import make_model

    return str(make_model(tmp_path_factory.mktemp("moe") / "tiny-moe", "tiny-moe", seed=0))


def _reference_routes(model, ids: list[int]) -> torch.Tensor:
    """[len(ids), layers, top_k]: each position's experts in one forward over ``ids``."""
    seen = []
    handles = [r.register_forward_hook(lambda m, a, out: seen.append(out[-1])) for r in model_routers(model)]
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]))
    for h in handles:
        h.remove()
    return torch.stack(seen, 1)


def _generate(engine: Engine, prompts: list[list[int]], n: int) -> list[Request]:
    reqs = [
        Request(p, GenParams(max_tokens=6, temperature=1.0, n=n, seed=i, ignore_eos=True))
        for i, p in enumerate(prompts)
    ]
    for r in reqs:
        engine.submit(r)
    deadline = time.monotonic() + 60
    while not all(r.done for r in reqs):
        assert time.monotonic() < deadline, "engine did not finish"
        time.sleep(0.01)
    return reqs


def test_the_engine_records_the_experts_that_predicted_each_token(tiny_moe):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_moe, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(tiny_moe)
    engine = Engine(model, tok, max_model_len=64, eos_ids=set(), max_batch_size=8, record_routes=True)
    engine.start()
    try:
        # prompts of different lengths share a left-padded prefill; n = 2 repeats a cache row
        reqs = _generate(engine, [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14]], n=2)
    finally:
        engine.shutdown()
    for req in reqs:
        assert req.error is None
        for comp in req.completions:
            assert len(comp.routed_experts) == len(comp.token_ids) == 6
            assert all(len(r) == LAYERS * TOP_K for r in comp.routed_experts)
            full = _reference_routes(model, req.prompt_ids + comp.token_ids)
            start = len(req.prompt_ids) - 1  # token j was predicted at position start + j
            want = full[start : start + len(comp.token_ids)].reshape(len(comp.token_ids), -1)
            # a routed token's pair is a set: compare each layer's choice order-free
            got = torch.tensor(comp.routed_experts).view(-1, LAYERS, TOP_K).sort(-1).values
            assert torch.equal(got, want.view(-1, LAYERS, TOP_K).sort(-1).values)


def test_without_the_setting_nothing_is_recorded(tiny_moe):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_moe, dtype=torch.float32).eval()
    engine = Engine(model, AutoTokenizer.from_pretrained(tiny_moe), max_model_len=64, eos_ids=set())
    engine.start()
    try:
        (req,) = _generate(engine, [[5, 6, 7]], n=1)
    finally:
        engine.shutdown()
    assert req.completions[0].routed_experts == [] and not any(r._forward_hooks for r in model_routers(model))


def test_a_dense_model_is_refused(tmp_path):
    from prl_model_init import make_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(make_model(tmp_path / "tiny", "tiny", seed=0)))
    with pytest.raises(ValueError, match="return_routed_experts: the model has no MoE router"):
        RouteRecorder(model)


def test_the_generate_route_returns_them(tiny_moe, tmp_path, server_process):
    start_server, stop_server = server_process
    backend = {"dtype": "float32", "num_threads": 1, "return_routed_experts": True}
    proc, url = start_server({"model": {"name": tiny_moe}, "server": {"port": 0}, "backend": backend}, tmp_path)

    async def go():
        async with InferenceHTTPClient(url, model=tiny_moe, timeout=60) as c:
            return await c.generate_n([5, 6, 7, 8], Sampling(max_tokens=5, seed=1), 2)

    try:
        gens = asyncio.run(go())
    finally:
        stop_server(proc)
    for gen in gens:
        assert gen.routed_experts is not None and len(gen.routed_experts) == len(gen.token_ids)
        assert all(len(r) == LAYERS * TOP_K and all(0 <= e < 8 for e in r) for r in gen.routed_experts)
