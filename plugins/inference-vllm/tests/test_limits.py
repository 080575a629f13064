"""``server.limits`` on the vLLM backend (set in conftest's ``LIMITS``), and a bounded
schemathesis run against its OpenAPI schema: no 5xx, a message with every 4xx, still serving."""

from __future__ import annotations

import os
import time

import httpx
import pytest

pytestmark = pytest.mark.vllm

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
OVER = [
    ("/v1/chat/completions", {**CHAT, "n": 100_000}, 400, "max_n = 64"),
    ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 600}, 400, "max_completion_tokens (600)"),
    ("/v1/completions", {"prompt": ["a"] * 65, "max_tokens": 1}, 400, "n x prompts (1 x 65)"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 5000}, 400, "max_tokens = 511"),
    ("/v1/completions", {"prompt": list(range(1, 506)), "max_tokens": 1}, 400, "max_prompt_tokens = 500"),
    ("/inference/v1/generate", {"token_ids": [1, 2], "sampling_params": {"n": 5000}}, 400, "max_n = 64"),
    (
        "/inference/v1/generate",
        {"token_ids": [5] * 505, "sampling_params": {"max_tokens": 1}},
        400,
        "max_prompt_tokens",
    ),
    ("/v1/completions", {"prompt": "x" * (5 * 1024 * 1024), "max_tokens": 1}, 413, "max_body_bytes"),
]


@pytest.fixture
def http(vllm_server):
    with httpx.Client(base_url=vllm_server["url"], timeout=120) as client:
        yield client


@pytest.mark.parametrize(("path", "body", "status", "names"), OVER, ids=[f"{p}-{n}" for p, _, _, n in OVER])
def test_a_request_over_a_limit_is_refused_naming_the_setting(http, vllm_server, path, body, status, names):
    body = {"model": str(vllm_server["model_dir"]), **body}
    resp = http.post(path, json=body)
    assert resp.status_code == status, resp.text[:500]
    message = resp.json()["error"]["message"]
    assert names in message and "server.limits." in message


def test_within_the_limits_is_served(http, vllm_server):
    model = str(vllm_server["model_dir"])
    resp = http.post("/v1/chat/completions", json={**CHAT, "model": model, "n": 4})
    assert resp.status_code == 200 and len(resp.json()["choices"]) == 4
    resp = http.post("/inference/v1/generate", json={"token_ids": [5] * 500, "sampling_params": {"max_tokens": 2}})
    assert resp.status_code == 200, resp.text[:300]


def test_schemathesis_finds_no_server_error(vllm_server):
    """Our surface only: vLLM's other routes (tokenize, pooling, ...) are vLLM's to fuzz."""
    pytest.importorskip("schemathesis")
    from prl.testing.fuzz import fuzz_openapi

    t0 = time.monotonic()
    paths = "^/(v1/chat/completions|v1/completions|v1/models|inference/v1/generate|health|update_weights)$"
    seen = fuzz_openapi(vllm_server["url"], paths, max_examples=int(os.environ.get("PRL_FUZZ_EXAMPLES", "15")))
    print(f"\nschemathesis (vLLM): {sum(seen.values())} requests in {time.monotonic() - t0:.0f} s, {dict(seen)}")
    with httpx.Client(base_url=vllm_server["url"], timeout=120) as http:
        assert http.get("/health").json()["status"] == "ok"
        resp = http.post("/inference/v1/generate", json={"token_ids": [1, 2], "sampling_params": {"max_tokens": 2}})
        assert resp.status_code == 200
