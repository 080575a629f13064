"""prl's own env-server protocol: newline-delimited JSON over one TCP connection per call.

Used for tasksets that have no protocol of their own (the in-process kind, served by hand
with ``prl env-server`` for a multi-host layout). A call is one request line and one reply
line::

    -> {"method": "health"}
    <- {"ok": true, "taskset": "<id>"}
    -> {"method": "rollout", "task": {...}, "sampling": {...}, "policy_version": 3,
        "client": {"config": {<ClientConfig fields>}, "model": ...},
        "renderer": {"name": ..., "config": {...}, "tokenizer": "<dir>"}}
    <- {"ok": true, "trace": {...}}   |   {"ok": false, "error": "<Type>: <message>"}

The server builds (and caches) an inference client and a renderer from the descriptors in
the request, so the orchestrator stays the single owner of endpoint and template choices.

A malformed line (not JSON, not an object, an unknown method, a field of the wrong type, a
line over ``REQUEST_LINE_LIMIT`` bytes or none within ``REQUEST_READ_TIMEOUT_S``) gets
``{"ok": false, "error": "BadRequest: <what is wrong>"}``; the connection then closes and the
server keeps serving others (:mod:`prl.envs.requests`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from prl.config.sections import ClientConfig
from prl.contracts.inference import InferenceClient
from prl.contracts.renderer import Renderer
from prl.contracts.taskset import Task, Taskset
from prl.envs.guard import guarded
from prl.envs.requests import BadRequest, parse_line, parse_rollout
from prl.envs.wire import sampling_to_dict, task_to_dict, trace_from_dict, trace_to_dict
from prl.types import Sampling, Trace

log = logging.getLogger(__name__)

LINE_LIMIT = 256 * 1024 * 1024  # one trace of a long multi-turn episode fits comfortably
# Requests carry a task and two descriptors, never a trace: a much smaller bound keeps one
# client from making the server buffer hundreds of MB.
REQUEST_LINE_LIMIT = 16 * 1024 * 1024
REQUEST_READ_TIMEOUT_S = 60.0


def client_descriptor(client: InferenceClient) -> dict[str, Any]:
    """What a remote env server needs to reach the same inference endpoint."""
    config = getattr(client, "config", None)
    if isinstance(config, ClientConfig):
        fields = config.model_dump(mode="json")
    else:
        fields = {k: getattr(client, k, None) for k in ("base_url", "api_key")}
        fields = {k: str(v) for k, v in fields.items() if v is not None}
    if not fields.get("base_url"):
        raise ValueError(
            f"{type(client).__name__} has no base_url; a remote env server cannot reach inference through it"
        )
    return {"config": fields, "model": getattr(client, "model", None)}


def renderer_descriptor(renderer: Renderer) -> dict[str, Any]:
    config = renderer.config.model_dump(mode="json") if hasattr(renderer.config, "model_dump") else {}
    return {"name": getattr(renderer, "name", None), "config": config, "tokenizer": renderer.tokenizer_path}


class ProtocolServer:
    """Serves one taskset's rollouts on 127.0.0.1 (or ``host``) until cancelled."""

    def __init__(self, taskset: Taskset, env: str, timeout: float | None) -> None:
        self.taskset = taskset
        self.env = env
        self.timeout = timeout
        self._clients: dict[str, InferenceClient] = {}
        self._renderers: dict[str, Renderer] = {}

    async def serve(self, host: str, on_bound: Callable[[str], None]) -> None:
        server = await asyncio.start_server(self._handle, host, 0, limit=REQUEST_LINE_LIMIT)
        port = server.sockets[0].getsockname()[1]
        on_bound(f"{host}:{port}")
        async with server:
            await server.serve_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await _read_line(reader)
            if not line:
                return
            reply = await self._dispatch(parse_line(line))
        except Exception as exc:  # noqa: BLE001 - a malformed request gets an error reply
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        try:
            data = json.dumps(reply).encode()
        except (TypeError, ValueError) as exc:  # a taskset put something non-JSON in its trace
            data = json.dumps({"ok": False, "error": f"TypeError: trace is not JSON-serialisable: {exc}"}).encode()
        try:
            writer.write(data + b"\n")
            await writer.drain()
        except ConnectionError:
            log.debug("env-server client left before its reply")
        finally:
            writer.close()

    async def _dispatch(self, req: dict[str, Any]) -> dict[str, Any]:
        if req["method"] == "health":
            return {"ok": True, "taskset": getattr(self.taskset, "id", "?")}
        task, sampling, version, client_spec, renderer_spec = parse_rollout(req)
        client = self._client(client_spec)
        renderer = self._renderer(renderer_spec)
        work = self.taskset.rollout(task, client, renderer, sampling)
        trace = await guarded(work, task, self.env, version, self.timeout)
        return {"ok": True, "trace": trace_to_dict(trace)}

    def _client(self, spec: dict[str, Any]) -> InferenceClient:
        key = json.dumps(spec, sort_keys=True)
        if key not in self._clients:
            from prl import client as client_mod  # core's httpx client

            HttpClient = getattr(client_mod, "InferenceClient", None) or client_mod.InferenceHTTPClient
            config = ClientConfig.model_validate(spec["config"])
            self._clients[key] = HttpClient.from_config(config, model=spec.get("model"))
        return self._clients[key]

    def _renderer(self, spec: dict[str, Any]) -> Renderer:
        key = json.dumps(spec, sort_keys=True)
        if key not in self._renderers:
            from prl.plugins import RENDERERS, get_registry

            config = get_registry().get(RENDERERS, spec["name"]).Config.model_validate(spec.get("config") or {})
            self._renderers[key] = config.build(tokenizer=spec["tokenizer"])
        return self._renderers[key]


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    """One request line, or :class:`BadRequest` for one too long or too slow to arrive."""
    try:
        async with asyncio.timeout(REQUEST_READ_TIMEOUT_S):
            return await reader.readline()
    except TimeoutError:
        raise BadRequest(f"no request line within {REQUEST_READ_TIMEOUT_S:g} s") from None
    except ValueError:  # over the reader's limit; the rest of the line is still coming
        pass
    # Read the rest and drop it, so the client has finished sending when the error reply
    # and the close arrive (closing on unread data would reset the connection first).
    try:
        while True:
            async with asyncio.timeout(REQUEST_READ_TIMEOUT_S):
                chunk = await reader.read(1 << 20)
            if not chunk or b"\n" in chunk:
                break
    except TimeoutError:
        pass
    raise BadRequest(f"request line is over {REQUEST_LINE_LIMIT} bytes (REQUEST_LINE_LIMIT)")


async def call(address: str, request: dict[str, Any], timeout: float | None) -> dict[str, Any]:
    """One request/reply exchange; connection errors propagate to the caller."""
    host, _, port = address.rpartition(":")
    async with asyncio.timeout(10.0):
        reader, writer = await asyncio.open_connection(host, int(port), limit=LINE_LIMIT)
    try:
        writer.write(json.dumps(request).encode() + b"\n")
        await writer.drain()
        async with asyncio.timeout(timeout):
            line = await reader.readline()
    finally:
        writer.close()
    if not line:
        raise ConnectionError(f"env server at {address} closed the connection without a reply")
    return json.loads(line)


class ProtocolClient:
    """The orchestrator side of :class:`ProtocolServer`."""

    enforces_timeout = True  # the server applies env.timeout to each rollout

    def __init__(self, address: str) -> None:
        self.address = address

    async def health(self, timeout: float = 5.0) -> bool:
        try:
            reply = await call(self.address, {"method": "health"}, timeout)
        except (TimeoutError, OSError, ValueError):
            return False
        return bool(reply.get("ok"))

    async def rollout(
        self, task: Task, client: InferenceClient, renderer: Renderer, sampling: Sampling, policy_version: int
    ) -> Trace:
        request = {
            "method": "rollout",
            "task": task_to_dict(task),
            "sampling": sampling_to_dict(sampling),
            "policy_version": policy_version,
            "client": client_descriptor(client),
            "renderer": renderer_descriptor(renderer),
        }
        # The server applies env.timeout itself; the caller's guard bounds the whole call.
        reply = await call(self.address, request, None)
        if not reply.get("ok"):
            raise RuntimeError(reply.get("error") or "env server request failed")
        return trace_from_dict(reply["trace"])

    async def close(self) -> None:
        return None
