"""Per-source results of a ``prl eval`` run (``results/<env>.jsonl``, ``docs/dashboard.md``).

The metrics rows of an eval hold one mean per source and no spread; the per-rollout file
holds every reward, so the mean and its standard error (sample standard deviation over
the square root of the number of rollouts) are computed here. The summary the run wrote
(``results/<env>.json``: avg@k, pass@k, ...) is passed through as it is.
"""

from __future__ import annotations

import json
import math
from typing import Any

from prl_dashboard.runs import Run


def _stats(rewards: list[float]) -> dict[str, float | int | None]:
    n = len(rewards)
    mean = sum(rewards) / n
    var = sum((r - mean) ** 2 for r in rewards) / (n - 1) if n > 1 else 0.0
    return {"n": n, "mean": mean, "std": math.sqrt(var), "stderr": math.sqrt(var / n) if n > 1 else None}


def _rewards(path) -> tuple[list[float], int]:
    """Rewards of every rollout in the file and the number of rollouts that errored."""
    rewards, errors = [], 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn last line of a running eval
            if isinstance(row, dict) and isinstance(row.get("reward"), int | float):
                rewards.append(float(row["reward"]))
                errors += row.get("error") is not None
    return rewards, errors


def results(run: Run) -> list[dict[str, Any]]:
    """One entry per source: ``{source, n, mean, std, stderr, errors, summary}``."""
    base = run.path / "results"
    if not base.is_dir():
        return []
    out = []
    for path in sorted(base.glob("*.jsonl")):
        rewards, errors = _rewards(path)
        if not rewards:
            continue
        summary = None
        try:
            summary = json.loads(path.with_suffix(".json").read_text())
        except (OSError, ValueError):
            pass  # still running: the summary is written at the end
        out.append({"source": path.stem, **_stats(rewards), "errors": errors, "summary": summary})
    return out
