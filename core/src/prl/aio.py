"""Waiting under a timeout without losing a cancellation.

On Python 3.11 ``asyncio.wait_for`` returns the awaited result instead of raising when its
task is cancelled in the same loop turn as the awaited thing completes (CPython gh-86296,
fixed in 3.12). A loop of ``wait_for(event.wait(), t)`` then swallows the cancel of a
shutdown and spins on: the orchestrator's batch collection did exactly that under load,
and the run it belonged to never stopped. ``asyncio.timeout`` delivers a cancellation to
the awaiting coroutine itself and turns only its own expiry into ``TimeoutError``, so prl
waits through it (here, or ``async with asyncio.timeout(...)`` inline), never ``wait_for``.
"""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait up to ``timeout`` seconds (None: no limit) for ``event``; whether it is set.
    A cancellation of the waiting task always propagates."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass
    return event.is_set()
