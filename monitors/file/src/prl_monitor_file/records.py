"""Turning metric rows and trace dicts into JSON-safe records.

Metric rows keep only finite numbers: NaN and ±inf cannot be written as JSON numbers and
would poison every reader's aggregate, so they are dropped with a warning naming the key.
Trace records round every float to ``float_decimals`` (per-token logprobs dominate the
size of a trace, and 4 decimals are plenty to read them); non-finite floats become null.
"""

from __future__ import annotations

import logging
import math
from typing import Any

log = logging.getLogger("prl.monitors.file")


def number(value: Any) -> int | float | None:
    """``value`` as a JSON number (0-d tensors and numpy scalars included), else None."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value
    if hasattr(value, "item"):
        try:
            return number(value.item())
        except (TypeError, ValueError, RuntimeError):
            return None
    return None


def clean_metrics(metrics: dict[str, Any]) -> dict[str, int | float]:
    """Finite numeric metrics only; anything else is dropped with a warning."""
    out: dict[str, int | float] = {}
    dropped: list[str] = []
    for key, value in metrics.items():
        num = number(value)
        if num is None or (isinstance(num, float) and not math.isfinite(num)):
            dropped.append(f"{key}={value!r}")
            continue
        out[key] = num
    if dropped:
        log.warning("file monitor: dropped non-finite or non-numeric metrics: %s", ", ".join(dropped))
    return out


_PLAIN = frozenset({int, bool, str, type(None)})


def round_floats(value: Any, decimals: int) -> Any:
    """A copy of ``value`` with every float rounded and non-finite floats set to None."""
    if isinstance(value, float):
        return round(value, decimals) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: round_floats(v, decimals) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        # Per-token arrays (a trainer step's annotations: tens of thousands of values, written
        # while the GPU waits for the next step) are handled inline, not with a call per value.
        finite = math.isfinite
        return [
            (round(v, decimals) if finite(v) else None)
            if type(v) is float
            else v
            if type(v) in _PLAIN
            else round_floats(v, decimals)
            for v in value
        ]
    return value


def index_row(trace: dict[str, Any], step: int | None, chunk: int, offset: int) -> dict[str, Any]:
    """The summary row of one episode for ``traces/stream.index.jsonl``."""
    branches = trace.get("branches") or []
    return {
        "id": trace.get("trace_id", trace.get("id")),
        "kind": trace.get("kind", "train"),
        "env": trace.get("env"),
        "group": trace.get("group", trace.get("task_id")),
        "step": step,
        "ok": trace.get("error") is None and not trace.get("is_timeout", False),
        "reward": trace.get("reward"),
        "advantage": trace.get("advantage", _first_advantage(branches)),
        "tokens": sum(len(b.get("token_ids") or []) for b in branches),
        "turns": trace.get("turns"),
        "branches": len(branches),
        "stop_condition": trace.get("stop_condition"),
        "truncated": trace.get("is_truncated", trace.get("truncated", False)),
        "dispatch": trace.get("dispatch"),
        "arrival": trace.get("arrival"),
        "duration": trace.get("duration"),
        "chunk": chunk,
        "offset": offset,
    }


def _first_advantage(branches: list[dict[str, Any]]) -> float | None:
    """The advantage of the first sampled token (algorithms give one per trace)."""
    for branch in branches:
        advantages = branch.get("advantages")
        mask = branch.get("sampled_mask") or []
        if not advantages:
            continue
        for adv, sampled in zip(advantages, mask, strict=False):
            if sampled:
                return adv
    return None
