"""In-flight episodes, reported to the monitors while they run (``docs/monitoring.md``).

The orchestrator tells every monitor about an episode three times through
:meth:`prl.contracts.Monitor.log_live`: ``dispatch`` (the episode got its trace id and
waits to start), ``start`` (its rollout began; carries the prompt) and ``end`` (it
finished, and its trace goes to ``log_traces``). In between, each model turn is a
``turn`` event: :meth:`prl.tasks.Conversation.sample` calls :func:`report_turn`, which
finds the episode through a context variable, so a taskset reports its turns without a
new argument in the ``Taskset.rollout`` signature. Rollouts behind an env server run in
another process and report only ``start`` and ``end``.

Live reporting is best effort: a monitor that fails here is logged once and skipped, and
an episode never fails because of it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prl.contracts.monitor import Monitor
    from prl.types import Trace

log = logging.getLogger(__name__)

# The running episode's turn reporter; asyncio tasks copy it, so concurrent episodes
# (each its own task under ``asyncio.gather``) never see each other's.
_turn_sink: ContextVar[Callable[[dict[str, Any]], None] | None] = ContextVar("prl_live_turn", default=None)


def report_turn(event: dict[str, Any]) -> None:
    """Report one finished model turn of the episode running in this context (no-op
    outside a live episode). Never raises."""
    sink = _turn_sink.get()
    if sink is not None:
        sink({"event": "turn", "time": time.time(), **event})


class LiveEpisodes:
    """Sends the ``dispatch``/``start``/``turn``/``end`` events of episodes to monitors."""

    def __init__(self, monitors: list[Monitor]) -> None:
        self.monitors = monitors
        self._failed: set[int] = set()  # monitors already logged as failing
        self._pending: set[str] = set()  # dispatched, not started

    @staticmethod
    def new_id() -> str:
        """A trace id, fixed at dispatch so the live record and the finished trace match."""
        return uuid.uuid4().hex

    def _send(self, call: str, *args: Any) -> None:
        for monitor in self.monitors:
            method = getattr(monitor, call, None)  # duck-typed monitors may lack it
            if method is None:
                continue
            try:
                method(*args)
            except Exception as exc:  # noqa: BLE001 - a live view must never stop training
                if id(monitor) not in self._failed:
                    self._failed.add(id(monitor))
                    log.warning("monitor %s: live episode reporting failed (%s: %s); the run continues",
                                type(monitor).__name__, type(exc).__name__, exc)  # fmt: skip

    def clear(self) -> None:
        """Drop in-flight records a killed earlier process left behind."""
        self._send("clear_live")

    def dispatch(self, trace_id: str, info: dict[str, Any]) -> None:
        """``info``: ``env``, ``task_id``, ``group``, ``kind`` (train/eval), ``version``."""
        self._pending.add(trace_id)
        self._send("log_live", trace_id, {"event": "dispatch", "time": time.time(), **info})

    def drop_pending(self, trace_id: str) -> None:
        """End an episode that never started (cancelled while it waited for a slot);
        nothing for one that started, whose ``running`` block ended it."""
        if trace_id in self._pending:
            self._pending.discard(trace_id)
            self._send("log_live", trace_id, {"event": "end", "time": time.time()})

    async def started(self, trace_id: str, prompt: list[dict[str, Any]], rollout: Awaitable[Trace]) -> Trace:
        """Await ``rollout`` inside :meth:`running` and give its trace ``trace_id``."""
        with self.running(trace_id, prompt):
            trace = await rollout
        trace.trace_id = trace_id
        return trace

    @contextmanager
    def running(self, trace_id: str, prompt: list[dict[str, Any]]) -> Iterator[None]:
        """Report ``start`` now, each turn inside the block, and ``end`` on leaving it
        (also when the rollout is cancelled)."""
        self._pending.discard(trace_id)
        self._send("log_live", trace_id, {"event": "start", "time": time.time(), "prompt": prompt})
        token = _turn_sink.set(lambda event: self._send("log_live", trace_id, event))
        try:
            yield
        finally:
            _turn_sink.reset(token)
            self._send("log_live", trace_id, {"event": "end", "time": time.time()})
