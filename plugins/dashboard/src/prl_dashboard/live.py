"""In-flight episodes of a run, read from ``monitors/file/live/`` (``docs/monitoring.md``).

``pending/<trace_id>.json`` is an episode dispatched but not started; ``<trace_id>.jsonl``
one that runs, its first line the ``start`` event (dispatch fields and prompt), then one
``turn`` event per model turn. The orchestrator removes both once the episode ends, so any
file may vanish between listing and reading: such an episode is simply no longer live.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from prl_dashboard.runs import NotFound, Run

TRACE_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
MAX_EVENTS_BYTES = 4 * 1024 * 1024  # a runaway episode's log is served from its start only
ROW_FIELDS = ("env", "task_id", "group", "kind", "version", "dispatch")


def _events(path: Path) -> list[dict[str, Any]]:
    with open(path, "rb") as fh:
        data = fh.read(MAX_EVENTS_BYTES)
    events = []
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break  # an event being written: served once complete
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def _row(trace_id: str, status: str, info: dict[str, Any], events: list[dict[str, Any]], now: float) -> dict:
    row: dict[str, Any] = {"id": trace_id, "status": status, **{k: info.get(k) for k in ROW_FIELDS}}
    turns = [e for e in events if e.get("event") == "turn"]
    start = events[0].get("time") if events else None
    row.update(
        started=start,
        events=len(events),
        turns=len(turns),
        tokens=sum(int(e.get("tokens") or 0) for e in turns),
        elapsed=now - float(info.get("dispatch") or start or now),
    )
    return row


def listing(run: Run) -> dict[str, Any]:
    """Pending and running episodes, running first, each oldest first."""
    root, now = run.file_dir / "live", time.time()
    running, pending = [], []
    for path in sorted(root.glob("*.jsonl")):
        try:
            events = _events(path)
        except OSError:
            continue  # ended while listed
        info = events[0] if events else {}
        running.append(_row(path.stem, "running", info, events, now))
    for path in sorted((root / "pending").glob("*.json")):
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        pending.append(_row(path.stem, "pending", info, [], now))
    rows = sorted(running, key=lambda r: r["elapsed"], reverse=True) + sorted(
        pending, key=lambda r: r["elapsed"], reverse=True
    )
    return {"rows": rows, "running": len(running), "pending": len(pending)}


def episode(run: Run, trace_id: str) -> dict[str, Any]:
    """One live episode: its listing row, the prompt and every event so far."""
    if not TRACE_ID.match(trace_id):
        raise NotFound(f"live episode {trace_id!r}")
    root, now = run.file_dir / "live", time.time()
    try:
        events = _events(root / f"{trace_id}.jsonl")
        status = "running"
    except OSError:
        events, status = [], "pending"
    info = events[0] if events else None
    if info is None:
        try:
            info = json.loads((root / "pending" / f"{trace_id}.json").read_text())
        except (OSError, ValueError):
            raise NotFound(f"live episode {trace_id!r} (finished or never dispatched)") from None
    return {"row": _row(trace_id, status, info, events, now), "prompt": info.get("prompt") or [], "events": events}
