"""In-flight episodes on disk, for the dashboard's live rows (``docs/monitoring.md``).

Layout under ``monitors/file/live/``::

    pending/<trace_id>.json    dispatched, not started: {trace_id, env, task_id, group, kind,
                               version, dispatch}
    <trace_id>.jsonl           running: one event per line, the first ``start`` (the
                               dispatch fields plus ``prompt``), then one ``turn`` per model
                               turn as it returns

An episode is in exactly one of the two places; both go once it ends (the finished trace
is in the stream). Each event is one ``write`` on an ``O_APPEND`` descriptor opened for
that write, so a reader polling the file sees whole lines only, and nothing stays open
between events however many episodes are in flight.

Writing never raises: the first failure is logged and later ones are silent, so a full
disk or a removed directory costs the live view, never an episode.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from prl.fsutil import write_atomic

log = logging.getLogger(__name__)


class LiveWriter:
    """Writes the ``live/`` files of one producer's in-flight episodes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pending = root / "pending"
        self._dispatched: dict[str, dict[str, Any]] = {}  # trace_id -> dispatch fields
        self._warned = False

    def event(self, trace_id: str, event: dict[str, Any]) -> None:
        """Apply one :mod:`prl.live` event; never raises."""
        try:
            self._apply(trace_id, event)
        except Exception as exc:  # noqa: BLE001 - see the module docstring
            if not self._warned:
                self._warned = True
                log.warning("file monitor: cannot write live episode files under %s (%s: %s); "
                            "episodes continue, the dashboard shows no live rows", self.root,
                            type(exc).__name__, exc)  # fmt: skip

    def _apply(self, trace_id: str, event: dict[str, Any]) -> None:
        if "/" in trace_id or trace_id.startswith("."):
            raise ValueError(f"trace id {trace_id!r} is not a file name")
        kind = event.get("event")
        if kind == "dispatch":
            fields = {k: v for k, v in event.items() if k not in ("event", "time")}
            info = {"trace_id": trace_id, **fields, "dispatch": event.get("time")}
            self._dispatched[trace_id] = info
            self.pending.mkdir(parents=True, exist_ok=True)
            write_atomic(self.pending / f"{trace_id}.json", json.dumps(info))
        elif kind == "start":
            info = self._dispatched.get(trace_id, {"trace_id": trace_id})
            self._append(trace_id, {**info, **event})
            (self.pending / f"{trace_id}.json").unlink(missing_ok=True)
        elif kind == "end":
            self._dispatched.pop(trace_id, None)
            (self.pending / f"{trace_id}.json").unlink(missing_ok=True)
            (self.root / f"{trace_id}.jsonl").unlink(missing_ok=True)
        else:
            self._append(trace_id, event)

    def _append(self, trace_id: str, event: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(event, separators=(",", ":"), default=str) + "\n").encode()
        fd = os.open(self.root / f"{trace_id}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def clear(self) -> None:
        """Remove every live file (those of a killed earlier run); never raises."""
        self._dispatched.clear()
        try:
            shutil.rmtree(self.root, ignore_errors=False)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("file monitor: cannot clear stale live episodes in %s: %s", self.root, exc)
