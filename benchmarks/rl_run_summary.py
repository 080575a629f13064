"""Summarise a finished ``prl rl`` run from its metrics: the step-time split, throughput
and peak memory, and whether any step was lost or done twice.

    python benchmarks/rl_run_summary.py outputs/<run>

Medians over the steps after the first (which includes start-up and compilation).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

TRAINER = ("time/step", "time/wait_for_batch", "time/forward_backward", "time/broadcast_weights",
           "perf/throughput", "perf/peak_memory")  # fmt: skip
ORCH = ("time/step", "time/wait_for_policy")


def main(run_dir: str) -> int:
    rows = [json.loads(x) for x in (Path(run_dir) / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    trainer = {r["step"]: r for r in rows if r.get("producer") == "trainer" and "time/step" in r}
    orch = {r["step"]: r for r in rows if r.get("producer") == "orch" and "time/step" in r}
    steps = sorted(trainer)
    print(f"trainer steps {steps[0]}..{steps[-1]} ({len(steps)} rows), orchestrator {len(orch)} rows; "
          f"missing {sorted(set(range(1, steps[-1] + 1)) - set(steps)) or 'none'}")  # fmt: skip
    for name, table, keys in (("trainer", trainer, TRAINER), ("orchestrator", orch, ORCH)):
        later = [table[s] for s in sorted(table) if s > 1]
        for key in keys:
            values = [r[key] for r in later if key in r]
            if values:
                print(f"{name:<12} {key:<24} median {statistics.median(values):10.3f}  max {max(values):10.3f}")
    reward = [orch[s].get("reward/all/mean") for s in sorted(orch)]
    print(f"reward/all/mean first {reward[0]:.4f} last {reward[-1]:.4f}")
    tokens = [orch[s].get("progress/total_tokens") for s in sorted(orch) if "progress/total_tokens" in orch[s]]
    if tokens:
        print(f"samples' tokens trained: {tokens[-1]:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
