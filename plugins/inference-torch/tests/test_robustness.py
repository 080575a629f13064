"""The torch server under abuse: over-limit requests, a crowd of concurrent ones and a
schemathesis run against its OpenAPI schema. It must answer each with a 4xx (or a 503 once
its wait queue is full), never a 5xx from bad input, keep serving, and keep its memory
bounded: the peak RSS is printed and checked against a generous bound.

Before ``server.limits`` one chat request with ``n: 100000`` grew this server to 19 GB.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

API_KEY = "robust-key"  # admin routes stay closed to the fuzzer (401s)
LIMITS = {
    "max_n": 8,
    "max_prompt_tokens": 256,
    "max_tokens": 16,
    "max_body_bytes": 1024 * 1024,
    "max_tokens_in_flight": 2048,
    "max_queued_requests": 32,
}
MAX_EXAMPLES = int(os.environ.get("PRL_FUZZ_EXAMPLES", "30"))  # per operation
RSS_BOUND_GB = 3.0
FUZZ_PATHS = (
    "^/(v1/|inference/|health|update_weights|load_lora_adapter)"  # the tiny model's server idles well under 1 GB
)


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory, server_process):
    start_server, stop_server = server_process
    workdir = tmp_path_factory.mktemp("robust")
    backend = {"max_batch_size": 8, "max_prefill_tokens": 512, "dtype": "float32", "num_threads": 1}
    cfg = {
        "model": {"name": tiny_model},
        "server": {"port": 0, "api_key": API_KEY, "limits": LIMITS},
        "backend": backend,
    }
    proc, url = start_server(cfg, workdir)
    yield {"url": url, "pid": proc.pid}
    stop_server(proc)


def peak_rss_gb(pid: int) -> float:
    """The process's high-water resident set (VmHWM), in GiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024**2
    raise AssertionError("no VmHWM in /proc status")


def assert_still_serving(url: str) -> None:
    with httpx.Client(base_url=url, timeout=120) as http:
        assert http.get("/health").json()["status"] == "ok"
        resp = http.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        )
        assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["role"] == "assistant"
        metrics = http.get("/metrics").text
        assert "prl_tokens_in_flight 0" in metrics and "prl_requests_queued 0" in metrics


CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
OVER_LIMIT = [
    ("/v1/chat/completions", {**CHAT, "n": 100_000}, 400, "max_n"),
    ("/v1/chat/completions", {**CHAT, "n": 5000}, 400, "max_n"),
    ("/v1/completions", {"prompt": ["a"] * 5000, "max_tokens": 1}, 400, "max_n"),
    ("/v1/completions", {"prompt": "x" * 2 * 1024 * 1024, "max_tokens": 1}, 413, "max_body_bytes"),
    ("/inference/v1/generate", {"token_ids": [5] * 300}, 400, "max_prompt_tokens"),
    ("/inference/v1/generate", {"token_ids": [5], "sampling_params": {"max_tokens": 10**9}}, 400, "max_tokens"),
]


async def _crowd(url: str) -> dict[int, int]:
    """Over-limit requests and 160 concurrent generations (budget 2048 tokens, queue 32)."""
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as http:

        async def over(path: str, body: dict, status: int, setting: str) -> int:
            resp = await http.post(path, json=body)
            assert resp.status_code == status, resp.text[:300]
            assert f"server.limits.{setting}" in resp.json()["error"]["message"]
            return resp.status_code

        async def generate(i: int) -> int:
            body = {"token_ids": [3 + i % 50] * 64, "sampling_params": {"n": 2, "max_tokens": 16, "ignore_eos": True}}
            resp = await http.post("/inference/v1/generate", json=body)
            if resp.status_code == 503:
                assert "max_queued_requests" in resp.json()["error"]["message"]
                assert resp.headers["retry-after"]
            else:
                assert resp.status_code == 200, resp.text[:300]
                assert [len(c["token_ids"]) for c in resp.json()["choices"]] == [16, 16]
            return resp.status_code

        calls = [over(*case) for case in OVER_LIMIT * 3] + [generate(i) for i in range(160)]
        codes = await asyncio.gather(*calls)
    return {c: codes.count(c) for c in set(codes)}


def test_over_limit_and_concurrent_requests_leave_it_serving_with_bounded_memory(server):
    t0 = time.monotonic()
    counts = asyncio.run(_crowd(server["url"]))
    seconds = time.monotonic() - t0
    rss = peak_rss_gb(server["pid"])
    print(f"\ncrowd of {sum(counts.values())} requests: {counts} in {seconds:.1f} s; server peak RSS {rss:.2f} GiB")
    assert counts.get(200, 0) >= 12  # the budget admits 2048 / 160 requests at once, plus the queue
    assert counts.get(503, 0) > 0  # and refuses the rest once its queue of 32 is full
    assert rss < RSS_BOUND_GB
    assert_still_serving(server["url"])


def test_schemathesis_finds_no_server_error(server):
    from prl.testing.fuzz import fuzz_openapi

    pytest.importorskip("schemathesis")
    t0 = time.monotonic()
    seen = fuzz_openapi(server["url"], FUZZ_PATHS, max_examples=MAX_EXAMPLES)
    print(f"\nschemathesis: {sum(seen.values())} requests in {time.monotonic() - t0:.0f} s, statuses {dict(seen)}")
    assert seen[200] > 0 and seen[400] > 0 and seen[401] > 0  # it got through, got refused, hit closed admin routes


def test_still_serving_after_fuzzing(server):
    rss = peak_rss_gb(server["pid"])
    print(f"\nserver peak RSS after load and fuzzing: {rss:.2f} GiB (pid {server['pid']}, {os.cpu_count()} cpus)")
    assert rss < RSS_BOUND_GB
    assert_still_serving(server["url"])
