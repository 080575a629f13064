"""Reading ``metrics.jsonl`` back: one row per ``(producer, step)``, latest attempt first.

A resumed run redoes the steps after its checkpoint, so the file can hold a row of the same
producer and step from two attempts: the killed one and the one that resumed. Rows written
by a relaunch carry ``"attempt": N`` (N > 1; a row without it is attempt 1), and
:func:`read_metrics` keeps, for each ``(producer, step)``, only the rows of the newest
attempt, merged in file order (a producer may log one step in several rows). Rows not tied
to a step (``"step": null``) are kept as they are. A torn last line, left by a writer
killed mid-``write``, is skipped rather than failing every reader.
"""

from __future__ import annotations

import json
import os
from typing import Any


def attempt_of(row: dict[str, Any]) -> int:
    return int(row.get("attempt") or 1)


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The merged view of ``path``: step rows sorted by (step, producer), then the others."""
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    loose: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(row, dict):
                continue
            if row.get("step") is None:
                loose.append(row)
                continue
            key = (str(row.get("producer", "")), int(row["step"]))
            have = merged.get(key)
            if have is None or attempt_of(row) > attempt_of(have):
                merged[key] = dict(row)
            elif attempt_of(row) == attempt_of(have):
                have.update(row)
    return [merged[k] for k in sorted(merged, key=lambda k: (k[1], k[0]))] + loose


def metric_by_step(rows: list[dict[str, Any]], producer: str, name: str) -> dict[int, float]:
    """``{step: value}`` of one metric of one producer, from :func:`read_metrics` rows."""
    return {r["step"]: r[name] for r in rows if r.get("producer") == producer and name in r and r["step"] is not None}
