"""Held-out reward of the demo's evaluations, with standard errors.

    python examples/reverse-text/heldout.py RUN_DIR                 # one evaluation
    python examples/reverse-text/heldout.py BEFORE_DIR AFTER_DIR    # the gain of RL

RUN_DIR is a `prl eval` run directory (outputs/<run name>). Its episodes are read from the
file monitor's trace index (``monitors/file/traces/stream.index.jsonl``). The evaluation
samples k answers per held-out text, and the k answers of one text are not independent (an
easy text gets k good answers), so the standard error treats the text as the unit: the
standard deviation of the per-text mean rewards over the square root of the number of texts.

With two runs the gain is after − before, with its standard error both unpaired
(sqrt(se_before² + se_after²), the conservative figure the demo's verdict uses) and paired
by text (both runs score the same texts). The exit status is 0 either way; the verdict is a
line of text.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path


def per_text_rewards(run_dir: Path) -> dict[str, float]:
    """Mean reward of each held-out text (keyed by its task group) in one eval run."""
    index = run_dir / "monitors" / "file" / "traces" / "stream.index.jsonl"
    if not index.exists():
        raise SystemExit(f"heldout: {index} not found (is {run_dir} a prl eval run directory?)")
    by_text: dict[str, list[float]] = defaultdict(list)
    for line in index.read_text().splitlines():
        row = json.loads(line)
        # a failed rollout (error, timeout) has no answer to score: left out, as prl eval does
        if row.get("kind") == "eval" and row.get("reward") is not None and row.get("ok", True):
            by_text[str(row["group"])].append(float(row["reward"]))
    if len(by_text) < 2:
        raise SystemExit(f"heldout: {index} has fewer than two evaluated texts")
    return {text: sum(r) / len(r) for text, r in by_text.items()}


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (sample standard deviation / sqrt(n))."""
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def main(args: list[str]) -> None:
    if len(args) not in (1, 2):
        raise SystemExit("usage: heldout.py RUN_DIR [AFTER_RUN_DIR]")
    runs = [per_text_rewards(Path(a)) for a in args]
    stats = [mean_se(list(r.values())) for r in runs]
    for name, r, (mean, se) in zip(args, runs, stats, strict=True):
        print(f"{name}: held-out reward {mean:.4f} ± {se:.4f} (standard error over {len(r)} texts)")
    if len(runs) == 1:
        return
    (before, se_b), (after, se_a) = stats
    gain, se = after - before, math.sqrt(se_b**2 + se_a**2)
    shared = sorted(set(runs[0]) & set(runs[1]))
    paired = mean_se([runs[1][t] - runs[0][t] for t in shared])[1] if len(shared) > 1 else float("nan")
    z = gain / se if se > 0 else float("inf")
    print(f"gain {gain:+.4f} ± {se:.4f} unpaired ({z:.1f} standard errors), ± {paired:.4f} paired by text")
    ok = gain >= 0.10 and z >= 3
    print(f"verdict: {'RL learned' if ok else 'no clear gain'} (the demo asks for >= +0.10 and >= 3 standard errors)")


if __name__ == "__main__":
    main(sys.argv[1:])
