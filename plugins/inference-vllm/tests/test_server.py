"""vLLM-specific behaviour of the backend, on the session's one real server."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

pytestmark = pytest.mark.vllm


@pytest.fixture
def http(vllm_server, inference_server):
    with httpx.Client(base_url=vllm_server["url"], timeout=120) as client:
        client.api_key = inference_server.api_key  # the admin bearer token of the session's server
        yield client


def admin(http: httpx.Client, path: str, body: dict | None = None) -> httpx.Response:
    return http.post(path, json=body or {}, headers={"Authorization": f"Bearer {http.api_key}"})


def test_server_announces_its_url(vllm_server) -> None:
    assert vllm_server["url"].startswith("http://127.0.0.1:")
    assert f"listening on {vllm_server['url']}" in vllm_server["log"].read_text(errors="replace")


@pytest.mark.parametrize("path", ["/pause", "/resume", "/update_weights", "/load_lora_adapter"])
def test_admin_routes_need_the_bearer_token(http: httpx.Client, path: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        resp = http.post(path, json={"weight_dir": "/nowhere"}, headers=headers)
        assert resp.status_code == 401 and "Bearer" in resp.json()["error"]["message"]
    assert http.get("/health").json()["paused"] is False


def test_generate_rejects_bad_input_with_400s(http: httpx.Client, vllm_server) -> None:
    model = str(vllm_server["model_dir"])
    cases = [
        ({"token_ids": [], "sampling_params": {}}, 400, "token_ids"),
        ({"token_ids": [1, 10**6], "sampling_params": {}}, 400, "outside the vocabulary"),
        ({"token_ids": [1, 2], "stream": True}, 400, "stream"),
        ({"token_ids": [1, 2], "sampling_params": {"logprobs": 99}}, 400, "logprobs"),
        ({"token_ids": [1, 2], "sampling_params": {"top_p": 0}}, 400, "top_p"),
        ({"token_ids": [1, 2], "model": "nobody"}, 404, "not served here"),
        ({"token_ids": [1, 2], "images": ["data:image/png;base64,iVBORw0KGgo="]}, 400, "images: the vllm backend"),
        ([1, 2, 3], 400, "JSON object"),
    ]
    for body, status, words in cases:
        resp = http.post("/inference/v1/generate", json=body)
        assert resp.status_code == status, (body, resp.text)
        assert words in resp.json()["error"]["message"]
    ok = http.post(
        "/inference/v1/generate", json={"token_ids": [1, 2], "model": model, "sampling_params": {"max_tokens": 2}}
    )
    assert ok.status_code == 200 and len(ok.json()["choices"][0]["token_ids"]) <= 2


def test_update_weights_refuses_another_architecture(http: httpx.Client, tmp_path) -> None:
    from prl_model_init import make_model

    small = make_model(tmp_path / "small", preset="small", seed=0)
    before = http.get("/health").json()["version"]
    resp = admin(http, "/update_weights", {"weight_dir": str(small)})
    assert resp.status_code == 400 and "hidden_size=384 differs" in resp.json()["error"]["message"]
    assert http.get("/health").json()["version"] == before


def test_openai_replies_name_the_policy_version(http: httpx.Client, vllm_server) -> None:
    resp = http.post("/v1/completions", json={"model": str(vllm_server["model_dir"]), "prompt": "hi", "max_tokens": 3})
    body = resp.json()
    assert body["version"] == http.get("/health").json()["version"]
    assert len(body["choices"][0]["token_ids"]) == body["usage"]["completion_tokens"]


def test_weight_update_mid_request_is_recorded_in_weight_versions(http: httpx.Client, vllm_server) -> None:
    """A long request keeps running across an update; its spans say which version sampled what."""
    # The pause must land after the request's first token and before its last; how long that
    # takes on a loaded machine varies, so the delay is bisected between a pause that came
    # too early (nothing sampled) and one that came too late (all 400 sampled).
    early, late, outcome = 0.0, None, None
    for _attempt in range(10):
        delay = early + 0.1 if late is None else (early + late) / 2
        outcome, sampled = _update_during_a_long_request(http, str(vllm_server["model_dir"]), delay)
        if outcome is not None:
            break
        early, late = (delay, late) if sampled == 0 else (early, delay)
    if outcome is None:
        pytest.fail("ten 400-token requests were each paused before their first or after their last token")
    old, new, result = outcome
    split = []
    for choice in result["choices"]:
        spans = choice["weight_versions"]
        assert len(choice["token_ids"]) == 400 and choice["finish_reason"] == "length"
        assert spans[0]["start"] == 0 and spans[-1]["end"] == 400
        assert all(a["end"] == b["start"] for a, b in zip(spans, spans[1:], strict=False))
        assert int(spans[-1]["version"]) == new
        split.append([int(s["version"]) for s in spans] == [old, new])
    assert any(split), "no sample was sampled partly by each version"
    assert result["version"] == old
    assert http.get("/health").json() == {"status": "ok", "version": new, "paused": False}


def _update_during_a_long_request(
    http: httpx.Client, model_dir: str, delay: float
) -> tuple[tuple[int, int, dict] | None, float]:
    """Start a request for 16 samples of 400 tokens (16 keep each step slower, which widens
    the window between the first and the last token), pause ``delay`` seconds later, update,
    resume.

    Returns the versions and the reply, or None and the tokens sampled before the pause when
    the pause froze the request before its first token or after its last. The pause is sent
    without first polling for a sampled token: on a loaded CPU a tiny model samples all 400
    tokens in the time a metrics poll and a pause take to reach the server."""
    old = http.get("/health").json()["version"]
    result: list[dict] = []

    def long_request() -> None:
        with httpx.Client(base_url=http.base_url, timeout=300) as c:
            body = {"token_ids": [10, 20, 30], "model": model_dir,
                    "sampling_params": {"max_tokens": 400, "ignore_eos": True, "seed": 0, "n": 16}}  # fmt: skip
            result.append(c.post("/inference/v1/generate", json=body).json())

    baseline = generated_tokens(http)
    worker = threading.Thread(target=long_request)
    worker.start()
    time.sleep(delay)
    # Freeze the request where it is (pause keeps in-flight requests and their KV cache).
    assert admin(http, "/pause", {}).status_code == 200
    time.sleep(0.3)  # the counter is published after each engine step; let the last one land
    sampled = generated_tokens(http) - baseline
    if not 0 < sampled < 400 * 16:
        assert admin(http, "/resume", {}).status_code == 200
        worker.join(timeout=300)
        return None, sampled
    resp = admin(http, "/update_weights", {"weight_dir": model_dir})
    assert resp.status_code == 200
    assert admin(http, "/resume", {}).status_code == 200
    worker.join(timeout=300)
    return (old, resp.json()["version"], result[0]), sampled


def generated_tokens(http: httpx.Client) -> float:
    """vLLM's Prometheus counter of sampled tokens, summed over engines."""
    lines = http.get("/metrics").text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("vllm:generation_tokens_total"))
