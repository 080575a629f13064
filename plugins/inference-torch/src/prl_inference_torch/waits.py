"""Bounded waits of the torch server's admin routes: on the engine thread (a swap, an
adapter load) and on anything else polled (the trainer forming the broadcast group).

Past ``server.admin_timeout`` a wait answers 504 naming what it waited for; on shutdown
503 at once. The admin routes and the broadcast receiver both wait this way.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future
from typing import Any

from prl.contracts.http import ApiError

POLL_S = 0.1


def timed_out(state: Any, what: str) -> ApiError:
    return ApiError(
        f"gave up after {state.admin_timeout:g} s (server.admin_timeout) waiting for {what}", 504, "TimeoutError"
    )


def shutting_down(what: str) -> ApiError:
    return ApiError(f"server shutting down while waiting for {what}", 503, "ServiceUnavailableError")


async def wait_until(state: Any, ready: Any, what: str) -> None:
    """Poll ``ready()`` (cheap, non-blocking) until it is true, the admin timeout passes
    (504) or the server starts shutting down (503). Polling, not a thread blocked in a join:
    a blocked thread would keep the process alive after SIGTERM."""
    deadline = time.monotonic() + state.admin_timeout
    while not ready():
        if state.stopping:
            raise shutting_down(what)
        if time.monotonic() >= deadline:
            raise timed_out(state, what)
        await asyncio.sleep(POLL_S)


async def engine_call(state: Any, fn: Any, what: str, drain: bool = False) -> Any:
    """Run ``fn`` on the engine thread; past the admin timeout (or on shutdown) withdraw it
    if it has not started. Once started it runs to the end: a swap half done is worse."""
    future: Future = state.engine.call(fn, drain=drain)
    try:
        await wait_until(state, future.done, what)
    except asyncio.CancelledError:
        future.cancel()
        raise
    except ApiError:
        if future.cancel():
            raise
    return await asyncio.wrap_future(future)
