"""The sampling-mask bound: a generate request truncating with top_p alone keeps at most
``mask_top_k`` ids of its nucleus, so the masks shipped to the trainer stay small, and a
nucleus within the bound is sampled exactly as without it (docs/offload-and-replay.md)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prl_inference_torch.loading import load_state
from prl_inference_torch.server import build_app

from prl.config.components import InferenceConfig


@pytest.fixture(scope="module")
def state(tiny_model):
    backend = {"type": "torch", "device": "cpu", "max_batch_size": 4, "num_threads": 1}
    st = load_state(InferenceConfig.model_validate({"model": {"name": tiny_model}, "backend": backend}), None)
    yield st
    st.engine.shutdown()


def _generate(http, **sampling):
    body = {"token_ids": [30, 31, 32], "sampling_params": {"max_tokens": 6, "seed": 3, "ignore_eos": True, **sampling}}
    resp = http.post("/inference/v1/generate", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()["choices"][0]


def _metric(http, name: str) -> int:
    line = next(x for x in http.get("/metrics").text.splitlines() if x.startswith(name + " "))
    return int(line.split()[1])


def test_default_bound_is_256():
    from prl_inference_torch.backend import TorchInferenceConfig

    assert TorchInferenceConfig().mask_top_k == 256


def test_a_flat_nucleus_is_cut_to_the_bound_and_counted(state):
    state.mask_top_k = 5
    with TestClient(build_app(state)) as http:
        before = _metric(http, "prl_sampling_mask_bounded_total")
        # temperature 50 flattens the tiny model: the 0.99 nucleus holds most of the vocabulary
        choice = _generate(http, temperature=50.0, top_p=0.99)
        masks = choice["sampling_mask"]
        assert [len(m) for m in masks] == [5] * 6
        assert all(t in m for t, m in zip(choice["token_ids"], masks, strict=True))
        assert _metric(http, "prl_sampling_mask_bounded_total") - before == 6
        # a client's own top_k is left alone (and never counted as the bound)
        own = _generate(http, temperature=50.0, top_p=0.99, top_k=9)
        assert [len(m) for m in own["sampling_mask"]] == [9] * 6
        assert _metric(http, "prl_sampling_mask_bounded_total") - before == 6


def test_a_nucleus_within_the_bound_samples_the_same_tokens(state):
    with TestClient(build_app(state)) as http:
        state.mask_top_k = None
        free = _generate(http, temperature=1.0, top_p=0.3)
        widest = max(len(m) for m in free["sampling_mask"])
        assert widest > 1  # the test means something only if the nucleus has a choice
        state.mask_top_k = widest
        capped = _generate(http, temperature=1.0, top_p=0.3)
        assert capped["token_ids"] == free["token_ids"]
        assert capped["sampling_mask"] == free["sampling_mask"]
        # one below the widest nucleus cuts it there
        state.mask_top_k = widest - 1
        tighter = _generate(http, temperature=1.0, top_p=0.3)
        assert max(len(m) for m in tighter["sampling_mask"]) <= widest - 1


def test_chat_requests_build_no_masks(state):
    from prl_inference_torch.engine import GenParams, Request

    req = Request([30, 31], GenParams(max_tokens=3, top_p=0.9, seed=1, ignore_eos=True, sampling_mask=False))
    done = __import__("threading").Event()
    req.wake = lambda: done.set() if req.done else None
    state.engine.submit(req)
    assert done.wait(60)
    assert req.completions[0].sampling_mask == []
