"""Adaptive in-flight limit between ``min_inflight`` and ``max_inflight`` (AIMD on throughput).

The limit starts at ``min_inflight``. Completions are counted in windows of ``max(4, limit)``
episodes; at the end of each window the completion rate is compared with the previous
window's:

* the rate rose by more than 5 % (or this is the first window): the limit grows, since
  more parallel work still buys throughput. It doubles until the first window that brings
  no gain ("slow start", so a run starting at 1 reaches a few hundred within a few
  windows), and grows by a quarter (at least 1) after that;
* the rate fell by more than 10 % after a growth step: the server is saturated, so the
  limit goes back down by a fifth;
* otherwise it stays.

A timed-out rollout halves the limit at once (multiplicative decrease), as timeouts usually
mean an overloaded inference or env server. (Errors are not counted: a taskset that raises
on some tasks says nothing about load.)

:class:`AdaptiveGate` puts the same controller in front of code that runs rollouts as
plain coroutines (``prl eval``): ``await gate.run(rollout)`` waits while the rollouts in
flight reach the current limit, and reports each one's end back to the controller. With
``min_inflight == max_inflight`` it is a fixed semaphore.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class AdaptiveConcurrency:
    def __init__(self, min_inflight: int, max_inflight: int, clock=time.monotonic) -> None:
        self.low = min_inflight
        self.high = max_inflight
        self.limit = min_inflight
        self.clock = clock
        self._window_start = clock()
        self._window_done = 0
        self._last_rate: float | None = None
        self._grew = False
        self._slow_start = True

    def _clamp(self, value: float) -> int:
        return int(max(self.low, min(self.high, value)))

    def on_done(self, failed: bool = False) -> None:
        if failed:
            self.limit = self._clamp(self.limit // 2)
            self._slow_start = False
            self._reset_window()
            return
        self._window_done += 1
        if self._window_done < max(4, self.limit):
            return
        elapsed = max(self.clock() - self._window_start, 1e-9)
        rate = self._window_done / elapsed
        if self._last_rate is None or rate > self._last_rate * 1.05:
            step = self.limit if self._slow_start else max(1, self.limit // 4)
            self.limit = self._clamp(self.limit + step)
            self._grew = True
        else:
            self._slow_start = False
            if self._grew and rate < self._last_rate * 0.9:
                self.limit = self._clamp(self.limit - max(1, self.limit // 5))
            self._grew = False
        self._last_rate = rate
        self._reset_window()

    def _reset_window(self) -> None:
        self._window_start = self.clock()
        self._window_done = 0

    def metrics(self) -> dict[str, float]:
        return {"concurrency/limit": float(self.limit)}


class AdaptiveGate:
    """Admits at most ``controller.limit`` rollouts at a time (see the module docstring)."""

    def __init__(self, min_inflight: int, max_inflight: int, clock=time.monotonic) -> None:
        self.controller = AdaptiveConcurrency(min_inflight, max_inflight, clock)
        self.inflight = 0
        self.peak = 0
        self._changed = asyncio.Condition()

    async def run(self, rollout: Callable[[], Awaitable[T]]) -> T:
        """Wait for a free slot, await ``rollout()`` in it, and report its end: a result
        whose ``is_timeout`` is true halves the limit."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.inflight < self.controller.limit)
            self.inflight += 1
            self.peak = max(self.peak, self.inflight)
        timed_out = False
        try:
            result = await rollout()
            timed_out = bool(getattr(result, "is_timeout", False))
            return result
        finally:
            async with self._changed:
                self.inflight -= 1
                self.controller.on_done(failed=timed_out)
                self._changed.notify_all()  # the limit may have grown by more than one
