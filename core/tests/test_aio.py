"""prl.aio.wait_event: a cancellation that lands as the event is set is never lost (the
shutdown of an orchestrator collecting a batch hung on exactly that with wait_for)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from prl.aio import wait_event


async def _cancel_as_the_event_is_set(wait) -> str:
    """A task waits for an event in a loop, as the orchestrator's batch collection does; in
    one loop turn the event is set and the task cancelled. How the task ended."""
    event = asyncio.Event()

    async def collect():
        while True:
            await wait(event)
            event.clear()

    task = asyncio.create_task(collect())
    await asyncio.sleep(0.01)  # the task is waiting now
    event.set()
    task.cancel()
    try:
        async with asyncio.timeout(2.0):
            await task
    except asyncio.CancelledError:
        return "cancelled"
    except TimeoutError:
        task.cancel()  # the test's own clean-up: an uncancellable task would outlive it
        return "still running"
    return "returned"


def test_a_cancel_landing_as_the_event_is_set_stops_the_waiter():
    assert asyncio.run(_cancel_as_the_event_is_set(lambda e: wait_event(e, 1.0))) == "cancelled"


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for keeps cancellations from Python 3.12 on")
def test_wait_for_loses_that_cancel_on_python_3_11():
    """Why prl.aio exists: the same loop over asyncio.wait_for spins on after the cancel."""

    async def wait_for(event):
        try:
            await asyncio.wait_for(event.wait(), 1.0)
        except TimeoutError:
            pass

    assert asyncio.run(_cancel_as_the_event_is_set(wait_for)) == "still running"


def test_wait_event_says_whether_the_event_was_set():
    async def go():
        event = asyncio.Event()
        timed_out = await wait_event(event, 0.05)
        asyncio.get_running_loop().call_later(0.01, event.set)
        return timed_out, await wait_event(event, 5.0), await wait_event(event, None)

    assert asyncio.run(go()) == (False, True, True)
