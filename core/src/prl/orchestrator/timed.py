"""Time-keyed orchestrator rows (``step: null``): what the process is doing between steps.

A step row says what a batch looked like once it shipped; it cannot show a dispatcher that
starves for ten minutes or an event loop blocked by a slow reward function. Every
``every_s`` seconds :class:`TimedMetrics` logs one row with ``step = None`` to every
monitor:

* ``inference/in_flight`` (requests open right now), ``inference/requests`` and
  ``inference/latency_mean`` (requests finished since the last row, and their mean
  seconds), ``inference/policy_version``;
* ``dispatcher/in_flight_groups``, ``dispatcher/in_flight_episodes``,
  ``dispatcher/buffered_traces`` and ``dispatcher/dispatched`` (groups started since the
  last row);
* ``concurrency/limit`` and ``concurrency/in_flight`` (the adaptive band's state);
* ``event_loop_lag/{mean,max}``: how late a ``sleep(probe_s)`` woke up, sampled
  continuously. Rollouts, scoring and env calls share one asyncio loop, so a callback that
  blocks it (a synchronous reward function, a big JSON parse) delays every request; the
  drift of a short sleep measures exactly that delay.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from prl.contracts.monitor import log_time_keyed

log = logging.getLogger("prl.orchestrator")

EVERY_S = 5.0
PROBE_S = 0.1


class LagProbe:
    """Sleeps ``probe_s`` in a loop and records how much later than asked each wake-up came."""

    def __init__(self, probe_s: float = PROBE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.probe_s = probe_s
        self.clock = clock
        self.lags: list[float] = []

    async def run(self) -> None:
        while True:
            start = self.clock()
            await asyncio.sleep(self.probe_s)
            self.lags.append(max(0.0, self.clock() - start - self.probe_s))

    def pop(self) -> dict[str, float]:
        """Mean and max lag (seconds) since the last call; empty when no probe finished."""
        lags, self.lags = self.lags, []
        if not lags:
            return {}
        return {"event_loop_lag/mean": sum(lags) / len(lags), "event_loop_lag/max": max(lags)}


class TimedMetrics:
    """Logs one ``step: null`` row every ``every_s`` seconds from ``orchestrator`` (see the
    module docstring); ``start()`` launches it on the running loop, ``stop()`` ends it."""

    def __init__(self, orchestrator: Any, monitors: list[Any], every_s: float = EVERY_S) -> None:
        self.orch = orchestrator
        self.monitors = monitors
        self.every_s = every_s
        self.probe = LagProbe(min(PROBE_S, every_s / 4))
        self._tasks: list[asyncio.Task] = []
        self._requests = (0, 0.0)
        self._groups = 0

    def start(self) -> None:
        if not self.monitors:
            return
        self._requests = self._request_counts()
        self._groups = self.orch.groups_dispatched
        self._tasks = [
            asyncio.create_task(self.probe.run(), name="event-loop-lag"),
            asyncio.create_task(self._loop(), name="timed-metrics"),
        ]

    async def stop(self) -> None:
        """Stop sampling and write the last period's row: a run shorter than ``every_s``
        still leaves one time-keyed row, and a longer one loses no tail."""
        running = bool(self._tasks)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if running:
            self._emit()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            self._emit()

    def _emit(self) -> None:
        log_time_keyed(self.monitors, self.row(), "time-keyed metrics", log)

    def _request_counts(self) -> tuple[int, float]:
        client = self.orch.client
        return int(getattr(client, "requests", 0)), float(getattr(client, "request_seconds", 0.0))

    def row(self) -> dict[str, float]:
        """The row for now; counters are differences since the previous row."""
        orch = self.orch
        requests, seconds = self._request_counts()
        done, spent = requests - self._requests[0], seconds - self._requests[1]
        self._requests = (requests, seconds)
        dispatched, self._groups = orch.groups_dispatched - self._groups, orch.groups_dispatched
        version = orch.follower.version if orch.follower is not None else None
        row = {
            "inference/in_flight": float(getattr(orch.client, "in_flight", 0)),
            "inference/requests": float(done),
            "dispatcher/in_flight_groups": float(len(orch.inflight)),
            "dispatcher/in_flight_episodes": float(orch.inflight_episodes),
            "dispatcher/buffered_traces": float(orch.buffer.count),
            "dispatcher/dispatched": float(dispatched),
            "concurrency/limit": float(orch.concurrency.limit),
            "concurrency/in_flight": float(orch.inflight_episodes),
        }
        if done:
            row["inference/latency_mean"] = spent / done
        if version is not None:
            row["inference/policy_version"] = float(version)
        row.update(self.probe.pop())
        return row
