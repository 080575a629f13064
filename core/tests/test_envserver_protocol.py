"""The env server's line protocol against malformed input: every bad line gets an error
reply naming what is wrong, and the server then still answers a valid rollout."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import pytest

from prl import hookimpl
from prl.contracts import Rendered, Renderer, RendererConfig, Taskset, TasksetConfig
from prl.envs import protocol
from prl.envs.protocol import ProtocolClient, ProtocolServer
from prl.types import Sampling, Trace


class ScoreTaskset(Taskset):
    """Rewards each task with ``data["score"]``; the rollout checks what the server built."""

    id = "proto-score"

    class Config(TasksetConfig):
        id: Literal["proto-score"] = "proto-score"
        """Tag."""

    def tasks(self, split="train"):
        return iter([])

    async def rollout(self, task, client, renderer, sampling):
        assert isinstance(sampling, Sampling) and client.base_url.startswith("http://127.0.0.1")
        ids = renderer.render(task.prompt).token_ids
        return Trace(
            trace_id="", task_id=task.task_id, env="", branches=[], reward=float(task.data["score"] + len(ids))
        )


class CodeRenderer(Renderer):
    name = "proto-codes"

    class Config(RendererConfig):
        name: Literal["proto-codes"] = "proto-codes"
        """Tag."""

    def render(self, messages, tools=None, add_generation_prompt=False):
        ids = [ord(c) for m in messages for c in m.get("content", "")]
        return Rendered(ids, [0] * len(ids), ["user"] * len(ids))

    def parse_response(self, token_ids, tools=None, prompt_ids=None):
        return {"content": ""}

    def get_stop_token_ids(self):
        return [0]


class ProtoPlugin:
    @hookimpl
    def prl_register_renderers(self):
        return [CodeRenderer]


def rollout_request(**changes) -> dict:
    req = {
        "method": "rollout",
        "task": {"task_id": "t1", "prompt": [{"role": "user", "content": "abc"}], "data": {"score": 2}},
        "sampling": {"temperature": 0.5, "max_tokens": 4},
        "policy_version": 3,
        "client": {"config": {"base_url": "http://127.0.0.1:9"}, "model": "m"},
        "renderer": {"name": "proto-codes", "config": {}, "tokenizer": None},
    }
    req.update(changes)
    return req


BAD_LINES = [
    (b"\n", "empty request line"),
    (b"garbage that is not json\n", "not valid JSON"),
    (b'{"method": "health"\n', "not valid JSON"),
    (b"\xff\xfe\xfd\n", "not UTF-8"),
    (b"[1, 2, 3]\n", "must be a JSON object, got list"),
    (b"42\n", "must be a JSON object, got int"),
    (b'{"method": "explode"}\n', "unknown method 'explode'"),
    (b"{}\n", "unknown method None"),
    (b"[" * 100_000 + b"\n", "not valid JSON"),
    (json.dumps(rollout_request(task="t1")).encode() + b"\n", "task: Input should be"),
    (json.dumps(rollout_request(task={"prompt": []})).encode() + b"\n", "task.task_id: Field required"),
    (json.dumps(rollout_request(policy_version="three")).encode() + b"\n", "policy_version: Input should be"),
    (json.dumps(rollout_request(policy_version=-1)).encode() + b"\n", "policy_version: Input should be greater"),
    (json.dumps(rollout_request(sampling={"temperature": "hot"})).encode() + b"\n", "temperature"),
    (json.dumps(rollout_request(client=None)).encode() + b"\n", "client: Input should be"),
    (json.dumps({k: v for k, v in rollout_request().items() if k != "renderer"}).encode() + b"\n", "renderer"),
]


async def _exchange(address: str, payload: bytes) -> dict:
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port), limit=protocol.LINE_LIMIT)
    try:
        writer.write(payload)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 30)
    finally:
        writer.close()
    return json.loads(line)


async def _serve_and(check):
    server = ProtocolServer(ScoreTaskset(ScoreTaskset.Config()), "proto", timeout=10)
    bound: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve("127.0.0.1", bound.set_result))
    try:
        return await check(await asyncio.wait_for(bound, 10))
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_each_malformed_line_gets_an_error_and_the_server_keeps_serving(register_plugin):
    register_plugin(ProtoPlugin(), "proto-plugin")

    async def check(address: str):
        for payload, expected in BAD_LINES:
            reply = await _exchange(address, payload)
            assert reply["ok"] is False and reply["error"].startswith("BadRequest: "), (payload[:80], reply)
            assert expected in reply["error"], (payload[:80], reply)
        client = ProtocolClient(address)
        assert await client.health()
        reply = await _exchange(address, json.dumps(rollout_request()).encode() + b"\n")
        assert reply["ok"] is True, reply
        trace = reply["trace"]
        assert (trace["reward"], trace["policy_version"], trace["env"]) == (5.0, 3, "proto")

    asyncio.run(_serve_and(check))


def test_a_line_over_the_limit_is_refused_without_buffering_it(register_plugin, monkeypatch):
    monkeypatch.setattr(protocol, "REQUEST_LINE_LIMIT", 64 * 1024)
    register_plugin(ProtoPlugin(), "proto-plugin")

    async def check(address: str):
        huge = b'{"method": "health", "pad": "' + b"x" * (4 * 1024 * 1024) + b'"}\n'
        reply = await _exchange(address, huge)
        assert reply["ok"] is False and f"over {64 * 1024} bytes" in reply["error"]
        assert await ProtocolClient(address).health()

    asyncio.run(_serve_and(check))


def test_a_client_that_sends_nothing_is_answered_after_the_read_timeout(monkeypatch):
    monkeypatch.setattr(protocol, "REQUEST_READ_TIMEOUT_S", 0.2)

    async def check(address: str):
        reply = await _exchange(address, b'{"method": "hea')  # no newline, then silence
        assert reply["ok"] is False and "no request line within 0.2 s" in reply["error"]
        assert await ProtocolClient(address).health()

    asyncio.run(_serve_and(check))


def test_a_client_that_hangs_up_early_does_not_stop_the_server():
    async def check(address: str):
        host, _, port = address.rpartition(":")
        for _ in range(20):
            _, writer = await asyncio.open_connection(host, int(port))
            writer.write(b'{"method": "health"}\n')
            writer.close()
        assert await ProtocolClient(address).health()

    asyncio.run(_serve_and(check))
