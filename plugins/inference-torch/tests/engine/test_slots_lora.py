"""Rows with a LoRA adapter on the slot path (prefill straight into slots, eager decode over
the pool) produce what the growing-cache path produces, beside rows without one."""

from __future__ import annotations

import threading

import pytest
import torch
from prl_inference_torch.attention import register
from prl_inference_torch.engine import Engine, GenParams, Request
from prl_inference_torch.weights import LoraSet


@pytest.fixture(scope="module")
def model(tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    m = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32, attn_implementation=register())
    return m.eval(), AutoTokenizer.from_pretrained(tiny_model)


def adapter_for(model) -> dict[str, tuple[torch.Tensor, torch.Tensor, float]]:
    """A rank-4 adapter on every layer's q_proj and down_proj, large enough to change tokens."""
    g = torch.Generator().manual_seed(5)
    weights = {}
    for name, module in model.named_modules():
        if name.endswith(("self_attn.q_proj", "mlp.down_proj")):
            a = torch.randn(4, module.in_features, generator=g) * 0.5
            b = torch.randn(module.out_features, 4, generator=g) * 0.5
            weights[name] = (a, b, 2.0)
    return weights


def serve(model, tok, slots: bool, adapters: bool = True) -> list[tuple[list[int], list[float]]]:
    lora = LoraSet(model)
    lora.load("a", adapter_for(model))
    engine = Engine(model, tok, max_model_len=512, eos_ids=set(), max_batch_size=4, slots=slots, lora=lora)
    g = torch.Generator().manual_seed(0)
    reqs = [
        Request(
            torch.randint(3, 200, (3 + 4 * i,), generator=g).tolist(),
            GenParams(max_tokens=6 + i, temperature=0.0, ignore_eos=True),
            adapter="a" if i % 2 and adapters else None,
        )
        for i in range(6)
    ]
    done = threading.Event()
    for r in reqs:
        r.wake = lambda: done.set() if all(x.done for x in reqs) else None
    engine.start()
    try:
        for r in reqs:
            engine.submit(r)
        assert done.wait(120), "engine did not finish"
    finally:
        engine.shutdown()
        lora.set_rows([], torch.device("cpu"))
    return [(r.completions[0].token_ids, r.completions[0].logprobs) for r in reqs]


def test_adapter_rows_match_the_growing_cache(model):
    m, tok = model
    want, got = serve(m, tok, slots=False), serve(m, tok, slots=True)
    for (tw, lw), (tg, lg) in zip(want, got, strict=True):
        assert tg == tw
        assert torch.allclose(torch.tensor(lg), torch.tensor(lw), atol=1e-4)
    # the adapter changes what its rows generate (else the comparison would prove nothing)
    base = serve(m, tok, slots=True, adapters=False)
    assert all(base[i][0] != got[i][0] for i in (1, 3, 5))
    assert all(base[i][0] == got[i][0] for i in (0, 2, 4))
