"""prl.client against the live torch server, plus its failure messages."""

from __future__ import annotations

import asyncio
import socket

import pytest

from prl.client import InferenceError, InferenceHTTPClient, response_version
from prl.types import Sampling


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_wait_ready_names_what_it_waited_for():
    url = f"http://127.0.0.1:{_free_port()}"

    async def go():
        async with InferenceHTTPClient(url) as client:
            await client.wait_ready(timeout=0.6, interval=0.1)

    with pytest.raises(TimeoutError, match=f"{url}.*GET /health"):
        asyncio.run(go())


def test_errors_carry_status_and_server_message(inference_server):
    async def go():
        async with InferenceHTTPClient(inference_server.base_url, model="not-served") as client:
            await client.generate([1, 2, 3], Sampling(max_tokens=2))

    with pytest.raises(InferenceError, match="not-served") as info:
        asyncio.run(go())
    assert info.value.status == 404


def test_generate_n_and_chat(inference_server):
    async def go():
        async with InferenceHTTPClient(inference_server.base_url) as client:
            await client.wait_ready(timeout=10)
            gens = await client.generate_n([10, 11, 12], Sampling(max_tokens=4, seed=1), 3)
            chat = await client.chat([{"role": "user", "content": "hey"}], Sampling(max_tokens=3, seed=1), n=2)
            return gens, chat

    gens, chat = asyncio.run(go())
    assert len(gens) == 3 and all(len(g.token_ids) == len(g.logprobs) <= 4 for g in gens)
    assert len({tuple(g.token_ids) for g in gens}) > 1  # choices are sampled independently
    assert len(chat["choices"]) == 2


def test_version_comes_from_body_or_weight_spans():
    assert response_version({"version": 4}) == 4
    assert response_version({}, {"weight_versions": [{"version": "7", "start": 0, "end": 3}]}) == 7
    assert response_version({}, {}) == 0
