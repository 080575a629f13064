"""``server.limits`` on the torch backend: each per-request limit is a 400 (413 for the body)
naming its setting, and the token budget queues, then refuses with 503 once its queue is full."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prl_inference_torch.loading import load_state
from prl_inference_torch.server import build_app

from prl.config.components import InferenceConfig

LIMITS = {
    "max_n": 4,
    "max_prompt_tokens": 32,
    "max_tokens": 16,
    "max_body_bytes": 4096,
    "max_tokens_in_flight": 64,
    "max_queued_requests": 1,
}


@pytest.fixture(scope="module")
def state(tiny_model):
    backend = {"type": "torch", "device": "cpu", "max_batch_size": 4, "num_threads": 1}
    cfg = InferenceConfig.model_validate(
        {"model": {"name": tiny_model}, "backend": backend, "server": {"limits": LIMITS}}
    )
    st = load_state(cfg, api_key=None)
    yield st
    st.engine.shutdown()


@pytest.fixture
def http(state):
    from fastapi.testclient import TestClient

    with TestClient(build_app(state)) as client:
        yield client


CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
OVER = [
    ("/v1/chat/completions", {**CHAT, "n": 100_000}, "max_n = 4"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": 17}, "max_tokens = 16"),
    ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 99}, "max_completion_tokens (99)"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a b c d " * 20}]}, "max_prompt_tokens = 32"),
    ("/v1/completions", {"prompt": "hi", "n": 5, "max_tokens": 2}, "max_n = 4"),
    ("/v1/completions", {"prompt": ["a", "b", "c"], "n": 2, "max_tokens": 2}, "n x prompts (2 x 3)"),
    ("/v1/completions", {"prompt": list(range(33)), "max_tokens": 2}, "max_prompt_tokens = 32"),
    ("/inference/v1/generate", {"token_ids": [1, 2], "sampling_params": {"n": 5000}}, "max_n = 4"),
    ("/inference/v1/generate", {"token_ids": [1] * 33}, "max_prompt_tokens = 32"),
    ("/inference/v1/generate", {"token_ids": [1], "sampling_params": {"max_tokens": 100}}, "max_tokens = 16"),
]


@pytest.mark.parametrize(("path", "body", "names"), OVER, ids=[f"{p}-{n}" for p, _, n in OVER])
def test_a_request_over_a_limit_is_a_400_naming_the_setting(http, path, body, names):
    resp = http.post(path, json=body)
    assert resp.status_code == 400, resp.text
    message = resp.json()["error"]["message"]
    assert names in message and "server.limits." in message


def test_a_body_over_max_body_bytes_is_a_413(http):
    resp = http.post("/v1/completions", json={"prompt": "x" * 5000, "max_tokens": 1})
    assert resp.status_code == 413
    assert "server.limits.max_body_bytes = 4096" in resp.json()["error"]["message"]
    assert http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1}).status_code == 200


def test_requests_within_the_limits_are_served(http):
    assert http.post("/v1/chat/completions", json={**CHAT, "n": 4}).status_code == 200
    resp = http.post("/inference/v1/generate", json={"token_ids": [1] * 32, "sampling_params": {"max_tokens": 16}})
    assert resp.status_code == 200 and len(resp.json()["choices"][0]["token_ids"]) <= 16


def test_the_token_budget_queues_then_answers_503(state):
    """Budget 64 tokens, queue of 1: one request runs, one waits, the third is refused."""

    async def scenario():
        transport = httpx.ASGITransport(app=build_app(state))
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as client:
            body = {"token_ids": [1] * 20, "sampling_params": {"max_tokens": 16, "ignore_eos": True}}
            calls = [client.post("/inference/v1/generate", json=body) for _ in range(3)]
            return await asyncio.gather(*calls)

    state.budget.peak = 0
    replies = asyncio.run(scenario())
    codes = sorted(r.status_code for r in replies)
    assert codes == [200, 200, 503], [r.text for r in replies]
    busy = next(r for r in replies if r.status_code == 503)
    assert busy.headers["retry-after"] == "1"
    message = busy.json()["error"]["message"]
    assert "max_tokens_in_flight = 64" in message and "max_queued_requests = 1" in message
    assert state.budget.in_flight == 0 and state.budget.queued == 0
    assert state.budget.peak == 36  # 20 + 16 each: the two served requests never ran together


def test_a_stream_holds_the_budget_until_it_ends(http, state):
    with http.stream("POST", "/v1/completions", json={"prompt": "hi", "max_tokens": 3, "stream": True}) as resp:
        assert resp.status_code == 200
        assert "[DONE]" in "".join(resp.iter_text())
    assert state.budget.in_flight == 0


def test_leaving_max_tokens_out_does_not_bypass_the_limit(http):
    body = {"token_ids": [1, 2], "sampling_params": {"ignore_eos": True}}
    resp = http.post("/inference/v1/generate", json=body)
    assert resp.status_code == 200 and len(resp.json()["choices"][0]["token_ids"]) == 16
