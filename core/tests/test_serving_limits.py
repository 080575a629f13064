"""The request limits every inference backend shares: per-request checks, the token budget
and the body-size middleware."""

from __future__ import annotations

import asyncio

import pytest

from prl.config.components import InferenceConfig, ServerLimitsConfig
from prl.contracts.http import ApiError
from prl.serving_limits import BodyLimit, TokenBudget, check_request, default_max_tokens, request_tokens


def test_limits_are_on_by_default_and_configurable():
    limits = InferenceConfig.model_validate({}).server.limits
    assert limits.max_n == 256 and limits.max_body_bytes == 32 * 1024 * 1024
    assert limits.max_tokens_in_flight > 0 and limits.max_queued_requests > 0
    cfg = InferenceConfig.model_validate({"server": {"limits": {"max_n": 4, "max_tokens": 64}}})
    assert (cfg.server.limits.max_n, cfg.server.limits.max_tokens) == (4, 64)
    with pytest.raises(ValueError, match="max_n"):
        ServerLimitsConfig(max_n=0)


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"n": 100_000, "prompt_lens": [3], "max_tokens": None}, "server.limits.max_n = 8"),
        ({"n": 3, "prompt_lens": [1, 1, 1], "max_tokens": None}, "server.limits.max_n = 8"),
        ({"n": 1, "prompt_lens": [65], "max_tokens": None}, "server.limits.max_prompt_tokens = 64"),
        ({"n": 1, "prompt_lens": [4], "max_tokens": 33}, "server.limits.max_tokens = 32"),
    ],
)
def test_a_request_over_a_limit_is_a_400_naming_the_setting(kwargs, setting):
    limits = ServerLimitsConfig(max_n=8, max_prompt_tokens=64, max_tokens=32)
    with pytest.raises(ApiError) as err:
        check_request(limits, **kwargs)
    assert err.value.status == 400 and setting in err.value.message


def test_a_request_within_the_limits_passes():
    limits = ServerLimitsConfig(max_n=8, max_prompt_tokens=64, max_tokens=32)
    check_request(limits, n=8, prompt_lens=[64], max_tokens=32)
    check_request(ServerLimitsConfig(), n=1, prompt_lens=[10**6], max_tokens=10**6)  # None: context decides


def test_request_tokens_count_every_row_at_its_largest():
    assert request_tokens(4, 10, 5, 100) == 60
    assert request_tokens(2, 10, None, 100) == 200  # no max_tokens: up to the context


def test_budget_queues_in_order_and_refuses_past_the_queue():
    async def scenario():
        budget = TokenBudget(capacity=100, max_queued=2)
        await budget.acquire(60)
        order: list[str] = []

        async def wait(name: str, tokens: int) -> None:
            await budget.acquire(tokens)
            order.append(name)

        a = asyncio.create_task(wait("a", 50))
        b = asyncio.create_task(wait("b", 10))  # fits, but must not overtake a (FIFO)
        await asyncio.sleep(0)
        assert budget.queued == 2 and not order
        with pytest.raises(ApiError) as err:
            await budget.acquire(1)
        assert err.value.status == 503 and "max_queued_requests = 2" in err.value.message
        budget.release(60)
        await asyncio.gather(a, b)
        assert order == ["a", "b"] and budget.in_flight == 60
        budget.release(50)
        budget.release(10)
        # Larger than the whole budget: runs alone rather than never.
        await asyncio.wait_for(budget.acquire(500), 1)
        assert budget.in_flight == 500 and budget.peak == 500

    asyncio.run(scenario())


def test_a_cancelled_waiter_gives_its_place_back():
    async def scenario():
        budget = TokenBudget(capacity=10, max_queued=4)
        await budget.acquire(10)
        waiter = asyncio.create_task(budget.acquire(5))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert budget.queued == 0
        budget.release(10)
        assert budget.in_flight == 0

    asyncio.run(scenario())


def _app(max_bytes: int):
    fastapi = pytest.importorskip("fastapi")
    app = fastapi.FastAPI()
    app.add_middleware(BodyLimit, max_bytes=max_bytes)

    async def echo(request):
        return fastapi.responses.JSONResponse({"size": len(await request.body())})

    app.router.add_route("/echo", echo, methods=["POST"])
    return app


def test_body_over_the_limit_is_a_413_by_length_or_by_chunks():
    from fastapi.testclient import TestClient

    with TestClient(_app(1024)) as http:
        assert http.post("/echo", content=b"x" * 1024).json() == {"size": 1024}
        resp = http.post("/echo", content=b"x" * 1025)
        assert resp.status_code == 413 and "server.limits.max_body_bytes = 1024" in resp.json()["error"]["message"]
        # A chunked upload has no Content-Length: counted as it arrives.
        resp = http.post("/echo", content=iter([b"x" * 600, b"x" * 600]))
        assert resp.status_code == 413 and "max_body_bytes" in resp.text  # the app's HTTPException shape
        assert http.post("/echo", content=b"ok").status_code == 200
        resp = http.post("/echo", content=b"x", headers={"content-length": "abc"})
        assert resp.status_code == 400


def test_a_request_without_max_tokens_gets_the_limit_within_the_context():
    limits = ServerLimitsConfig(max_tokens=32)
    assert default_max_tokens(limits, None, 10, 100) == 32
    assert default_max_tokens(limits, None, 90, 100) == 10
    assert default_max_tokens(limits, 5, 10, 100) == 5
    assert default_max_tokens(ServerLimitsConfig(), None, 10, 100) is None
