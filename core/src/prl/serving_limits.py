"""Request limits every inference backend enforces (``[inference.server.limits]``).

Three guards, so that no client, and no crowd of clients, can take the server's memory:

* :func:`check_request` bounds what one request asks for (``n`` x prompts, prompt tokens,
  ``max_tokens``) and answers 400 naming the setting;
* :class:`BodyLimit` is an ASGI middleware answering 413 before a body over
  ``max_body_bytes`` is read into memory (by its Content-Length, or by counting chunks of a
  chunked upload);
* :class:`TokenBudget` admits requests while the tokens in flight, each request counted as
  ``n x (prompt + max_tokens)`` (its worst-case KV footprint), stay within
  ``max_tokens_in_flight``. Like vLLM's scheduler, it queues what does not fit rather than
  refusing it, so an orchestrator with more rollouts in flight than the server can run just
  waits; the queue is FIFO (no starvation of large requests) and bounded by
  ``max_queued_requests``, beyond which the answer is 503 with ``Retry-After``.

No torch and no web framework here: starlette is imported only when a body is too large.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from prl.contracts.http import ApiError

SETTING = "server.limits"
RETRY_AFTER_S = 1


def _over(what: str, value: int, name: str, limit: int) -> ApiError:
    return ApiError(f"{what} ({value}) is over the limit {SETTING}.{name} = {limit}")


def check_request(
    limits: Any, *, n: int, prompt_lens: list[int], max_tokens: int | None, field: str = "max_tokens"
) -> None:
    """400 when a request asks for more completions, prompt or output tokens than allowed.

    ``prompt_lens`` holds one length per prompt of the request; ``field`` is the name the
    client used for the output length (``max_completion_tokens`` on chat).
    """
    rows = n * max(len(prompt_lens), 1)
    if rows > limits.max_n:
        what = "n" if len(prompt_lens) <= 1 else f"n x prompts ({n} x {len(prompt_lens)})"
        raise _over(what, rows, "max_n", limits.max_n)
    if limits.max_prompt_tokens is not None:
        for length in prompt_lens:
            if length > limits.max_prompt_tokens:
                raise _over("prompt tokens", length, "max_prompt_tokens", limits.max_prompt_tokens)
    if max_tokens is not None and limits.max_tokens is not None and max_tokens > limits.max_tokens:
        raise _over(field, max_tokens, "max_tokens", limits.max_tokens)


def default_max_tokens(limits: Any, want: int | None, prompt_len: int, max_model_len: int) -> int | None:
    """A request's ``max_tokens``; when it names none and ``max_tokens`` is limited, the limit
    (within the context), so leaving the field out cannot bypass the limit."""
    if want is not None or limits.max_tokens is None:
        return want
    return max(1, min(limits.max_tokens, max_model_len - prompt_len))


def request_tokens(n: int, prompt_len: int, max_tokens: int | None, max_model_len: int) -> int:
    """What a request holds of the budget: each of its rows may grow to prompt + max_tokens."""
    out = max_tokens if max_tokens is not None else max(max_model_len - prompt_len, 1)
    return max(n, 1) * (prompt_len + out)


class TokenBudget:
    """FIFO admission of requests by the tokens they may hold (see the module docstring).

    Used from one event loop; no locking needed.
    """

    def __init__(self, capacity: int, max_queued: int) -> None:
        self.capacity = capacity
        self.max_queued = max_queued
        self.in_flight = 0
        self.peak = 0
        self._queue: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def queued(self) -> int:
        return len(self._queue)

    def _fits(self, tokens: int) -> bool:
        # A request bigger than the whole budget runs alone rather than never.
        return self.in_flight == 0 or self.in_flight + tokens <= self.capacity

    def _admit(self, tokens: int) -> None:
        self.in_flight += tokens
        self.peak = max(self.peak, self.in_flight)

    async def acquire(self, tokens: int) -> None:
        if not self._queue and self._fits(tokens):
            self._admit(tokens)
            return
        if len(self._queue) >= self.max_queued:
            raise ApiError(
                f"server busy: {self.in_flight} tokens in flight (limit {SETTING}.max_tokens_in_flight = "
                f"{self.capacity}) and {len(self._queue)} requests queued (limit {SETTING}.max_queued_requests = "
                f"{self.max_queued}); retry later",
                503,
                "ServiceUnavailableError",
            )
        entry = (tokens, asyncio.get_running_loop().create_future())
        self._queue.append(entry)
        try:
            await entry[1]
        except asyncio.CancelledError:
            if entry in self._queue:
                self._queue.remove(entry)
                self._wake()
            elif entry[1].done() and not entry[1].cancelled():
                self.release(tokens)  # admitted just as the client went away
            raise

    def release(self, tokens: int) -> None:
        self.in_flight -= tokens
        self._wake()

    def _wake(self) -> None:
        while self._queue and self._fits(self._queue[0][0]):
            tokens, future = self._queue.popleft()
            if future.done():  # its waiter was cancelled
                continue
            self._admit(tokens)
            future.set_result(None)

    @asynccontextmanager
    async def hold(self, tokens: int) -> AsyncIterator[None]:
        await self.acquire(tokens)
        try:
            yield
        finally:
            self.release(tokens)


Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class BodyLimit:
    """ASGI middleware: 413 for an HTTP request body over ``max_bytes``."""

    def __init__(self, app: Callable[..., Awaitable[None]], max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _message(self, size: int | None) -> str:
        got = f"{size} bytes" if size is not None else "a chunked body"
        return f"request body ({got}) is over the limit {SETTING}.max_body_bytes = {self.max_bytes}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            try:
                size = int(length)
            except ValueError:
                await _reply(send, 400, "Content-Length is not a number")
                return
            if size > self.max_bytes:
                await _reply(send, 413, self._message(size))
                return
        started = False
        seen = 0

        async def counting_receive() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    from starlette.exceptions import HTTPException

                    # FastAPI re-raises an HTTPException met while reading the body, so the
                    # app's own handler (or the fallback below) answers 413.
                    raise HTTPException(413, self._message(None if length is None else seen))
            return message

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except Exception as exc:
            if getattr(exc, "status_code", None) != 413 or started:
                raise
            await _reply(send, 413, str(getattr(exc, "detail", exc)))


async def _reply(send: Send, status: int, message: str) -> None:
    kind = "RequestTooLargeError" if status == 413 else "BadRequestError"
    body = json.dumps(ApiError(message, status, kind).body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def busy_headers(exc: ApiError) -> dict[str, str]:
    """``Retry-After`` for a 503 from the budget, so OpenAI-style clients back off and retry."""
    return {"Retry-After": str(RETRY_AFTER_S)} if exc.status == 503 else {}
