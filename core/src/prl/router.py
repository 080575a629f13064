"""An HTTP router in front of several inference engines of one model (data parallel).

One client-facing address (``inference.server.port``) for N engines (``backend_port + i``):

* OpenAI and token routes (``/v1/chat/completions``, ``/v1/completions``,
  ``/inference/v1/generate``, ``/v1/models``, ``/metrics``, ...) go to one engine, the one
  with the fewest requests in flight (ties: the next in turn, so an idle router spreads
  requests round robin). Responses stream through as they arrive (server-sent events too).
* Admin routes (``/update_weights``, ``/load_lora_adapter``, ``/pause``, ``/resume``,
  ``/init_broadcaster``) go to every engine at once, so all of them serve the same policy;
  the answer is the first failure if any engine failed, else for ``/update_weights``
  ``{"version": min over engines}``. ``/init_broadcaster`` gives engine i the ranks after
  engine i-1's (``rank_offset + i * workers_per_engine``) of the one broadcast group.
* ``GET /health`` is 200 only when every engine answers 200; its ``version`` is the oldest
  version any engine serves. ``/liveness`` is the router's own.

The router checks no API key itself: it forwards the client's ``Authorization`` header and
each engine (which holds the same key) accepts or refuses. Stdlib asyncio on the client
side and httpx towards the engines, so it runs in the torch-free core.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
from dataclasses import dataclass, field
from typing import Any

import httpx

from prl.client import DROPPED_RETRIES, post_retrying, send_retrying

FAN_OUT = {"/update_weights", "/load_lora_adapter", "/pause", "/resume", "/init_broadcaster"}
# Headers that describe one hop's connection, not the message (RFC 9110 §7.6.1).
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "te", "trailer", "upgrade"}
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Content Too Large", 502: "Bad Gateway"}
REASONS |= {503: "Service Unavailable"}


@dataclass
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


@dataclass
class Router:
    """Spreads requests over ``backends`` (base URLs) as the module docstring says."""

    backends: list[str]
    workers_per_engine: int = 1
    max_body_bytes: int = 32 * 1024 * 1024
    outstanding: list[int] = field(default_factory=list)
    served: list[int] = field(default_factory=list)
    _turn: Any = None
    _http: httpx.AsyncClient | None = None

    def __post_init__(self) -> None:
        self.outstanding = [0] * len(self.backends)
        self.served = [0] * len(self.backends)
        self._turn = itertools.cycle(range(len(self.backends)))

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0), limits=limits)
        return self._http

    def pick(self) -> int:
        """The engine with the fewest requests in flight; the next in turn among equals."""
        least = min(self.outstanding)
        for _ in range(len(self.backends)):
            i = next(self._turn)
            if self.outstanding[i] == least:
                return i
        return self.outstanding.index(least)

    # ---- the client side ------------------------------------------------------------------
    async def serve(self, sock: socket.socket) -> asyncio.Server:
        """Serve on an already bound, listening socket (see :func:`prl.serving.bind`)."""
        return await asyncio.start_server(self.handle, sock=sock, limit=1 << 20)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    req = await read_request(reader, self.max_body_bytes)
                except BodyTooLarge as exc:
                    await respond_json(writer, 413, _error(str(exc), 413), keep_alive=False)
                    return
                except (ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                if req is None:
                    return
                await self.dispatch(req, writer)
                if not req.keep_alive:
                    return
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def dispatch(self, req: HttpRequest, writer: asyncio.StreamWriter) -> None:
        path = req.path.split("?", 1)[0]
        if path == "/liveness":
            await respond_json(writer, 200, {"status": "ok"}, req.keep_alive)
        elif path == "/health" and req.method == "GET":
            status, body = await self.health()
            await respond_json(writer, status, body, req.keep_alive)
        elif path in FAN_OUT and req.method == "POST":
            status, body = await self.fan_out(path, req)
            await respond_json(writer, status, body, req.keep_alive)
        else:
            await self.proxy(req, writer)

    # ---- towards the engines ----------------------------------------------------------------
    async def health(self) -> tuple[int, dict[str, Any]]:
        """200 with the oldest version served when every engine is healthy, else 503."""
        answers = await asyncio.gather(*(self._get(url + "/health") for url in self.backends))
        down = [url for url, (status, _) in zip(self.backends, answers, strict=True) if status != 200]
        if down:
            return 503, _error(f"engines not healthy: {', '.join(down)}", 503)
        versions = [b.get("version") for _, b in answers if isinstance(b.get("version"), int)]
        return 200, {
            "status": "ok",
            "version": min(versions) if versions else None,
            "paused": any(b.get("paused") for _, b in answers),
            "engines": [
                {"url": url, "routed": n, **body}
                for url, n, (_, body) in zip(self.backends, self.served, answers, strict=True)
            ],
        }

    async def fan_out(self, path: str, req: HttpRequest) -> tuple[int, dict[str, Any]]:
        """POST to every engine; the first failure, else the merged answer."""
        try:
            payload = json.loads(req.body or b"{}")
        except ValueError:
            return 400, _error(f"{path}: the body is not JSON", 400)
        if not isinstance(payload, dict):
            return 400, _error(f"{path}: the body must be a JSON object", 400)
        # The body is re-encoded as JSON per engine, so the client's content headers go.
        headers = {k: v for k, v in _forwarded(req.headers).items() if k != "content-type"}
        bodies = [self._engine_body(path, payload, i) for i in range(len(self.backends))]
        answers = await asyncio.gather(
            *(self._post(url + path, body, headers) for url, body in zip(self.backends, bodies, strict=True))
        )
        for url, (status, body) in zip(self.backends, answers, strict=True):
            if status >= 400:
                return status, body if "error" in body else _error(f"{url}{path} -> HTTP {status}", status)
        first = answers[0][1]
        if path == "/update_weights":
            versions = [b.get("version") for _, b in answers]
            if all(isinstance(v, int) for v in versions):
                print(f"router: /update_weights: engine versions {versions}", flush=True)
                return 200, {**first, "version": min(versions)}
        return 200, first

    def _engine_body(self, path: str, payload: dict[str, Any], i: int) -> dict[str, Any]:
        if path == "/init_broadcaster" and isinstance(payload.get("rank_offset"), int):
            return {**payload, "rank_offset": payload["rank_offset"] + i * self.workers_per_engine}
        return payload

    async def _get(self, url: str) -> tuple[int, dict[str, Any]]:
        try:
            resp = await self.http.get(url, timeout=10.0)
            return resp.status_code, _json(resp)
        except httpx.HTTPError as exc:
            return 502, _error(f"GET {url}: {exc!r}", 502)

    async def _post(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        try:
            # an engine may drop a kept-alive connection it left idle (see prl.client.DROPPED)
            resp = await post_retrying(self.http, url, body, headers=headers)
            return resp.status_code, _json(resp)
        except httpx.HTTPError as exc:
            return 502, _error(f"POST {url}: {exc!r}", 502)

    async def proxy(self, req: HttpRequest, writer: asyncio.StreamWriter) -> None:
        """Forward to one engine and stream its answer back as it comes."""
        i = self.pick()
        self.outstanding[i] += 1
        self.served[i] += 1
        try:

            def send():
                upstream = self.http.build_request(
                    req.method, self.backends[i] + req.path, headers=_forwarded(req.headers), content=req.body
                )
                return self.http.send(upstream, stream=True)

            try:
                # resent only when dropped before the answer's head: nothing has reached the client
                resp = await send_retrying(send, DROPPED_RETRIES)
            except httpx.HTTPError as exc:
                await respond_json(writer, 502, _error(f"engine {self.backends[i]}: {exc!r}", 502), req.keep_alive)
                return
            try:
                headers = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in HOP]
                await _write_head(writer, resp.status_code, resp.reason_phrase, headers, req.keep_alive)
                async for chunk in resp.aiter_raw():
                    if chunk:
                        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            finally:
                await resp.aclose()
        finally:
            self.outstanding[i] -= 1

    async def aclose(self) -> None:
        print(f"router: requests routed per engine {self.served}", flush=True)
        if self._http is not None:
            await self._http.aclose()


class BodyTooLarge(ValueError):
    pass


async def read_request(reader: asyncio.StreamReader, max_body: int) -> HttpRequest | None:
    """One HTTP/1.1 request (None at a clean end of the connection)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader, max_body)
    else:
        length = int(headers.get("content-length", "0") or 0)
        if length > max_body:
            raise BodyTooLarge(f"request body of {length} bytes is over the limit of {max_body}")
        body = await reader.readexactly(length) if length else b""
    conn = headers.get("connection", "").lower()
    keep_alive = conn != "close" if version == "HTTP/1.1" else conn == "keep-alive"
    return HttpRequest(method, target, headers, body, keep_alive)


async def _read_chunked(reader: asyncio.StreamReader, max_body: int) -> bytes:
    parts, size = [], 0
    while True:
        n = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
        if n == 0:
            await reader.readuntil(b"\r\n")  # no trailers are expected; the empty line ends it
            return b"".join(parts)
        size += n
        if size > max_body:
            raise BodyTooLarge(f"request body is over the limit of {max_body} bytes")
        parts.append(await reader.readexactly(n))
        await reader.readexactly(2)


async def _write_head(writer, status: int, reason: str, headers: list[tuple[str, str]], keep_alive: bool) -> None:
    lines = [f"HTTP/1.1 {status} {reason or REASONS.get(status, '')}"]
    lines += [f"{k}: {v}" for k, v in headers]
    lines += ["transfer-encoding: chunked", f"connection: {'keep-alive' if keep_alive else 'close'}"]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))


async def respond_json(writer: asyncio.StreamWriter, status: int, body: dict[str, Any], keep_alive: bool) -> None:
    data = json.dumps(body).encode()
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\nconnection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    writer.write(head.encode("latin-1") + data)
    await writer.drain()


def _forwarded(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k not in HOP}


def _json(resp: httpx.Response) -> dict[str, Any]:
    try:
        body = resp.json()
    except ValueError:
        return {"text": resp.text[:300]}
    return body if isinstance(body, dict) else {"value": body}


def _error(message: str, status: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": "RouterError", "param": None, "code": status}}
