"""Which weight versions an SFT trainer broadcasts for online eval, and how the online-eval
process learns them.

Version ``v`` is the weights after step ``v`` (the base model is version 0). A trainer that
starts at step ``N`` (0 for a fresh run, the checkpoint's step on resume) broadcasts

* version ``N`` at start-up, so inference can serve the weights training starts from;
* every step ``S`` in ``N+1 .. total`` with ``S % eval.interval == 0``, and the final step.

The online-eval process cannot work out ``total`` itself when ``max_steps`` is unset (it is
one epoch of data, which only the trainer loads), so before its first broadcast the trainer
writes the plan to ``broadcasts/plan.json`` (atomically)::

    {"start": N, "total": T, "versions": [N, ...]}

The launcher deletes the file of an earlier attempt before it starts anything.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from prl.fsutil import write_atomic

PLAN_FILE = "plan.json"


def eval_versions(start: int, total: int, interval: int) -> list[int]:
    """The versions broadcast by a trainer going from step ``start`` to ``total``."""
    return [start] + [s for s in range(start + 1, total + 1) if s % interval == 0 or s == total]


def plan_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / "broadcasts" / PLAN_FILE


def write_plan(run_dir: str | Path, start: int, total: int, interval: int) -> list[int]:
    """Write the plan (trainer side); returns its versions."""
    versions = eval_versions(start, total, interval)
    body = json.dumps({"start": start, "total": total, "versions": versions})
    write_atomic(plan_path(run_dir), body)
    return versions


def read_plan(run_dir: str | Path, timeout: float, poll: float = 0.2) -> dict:
    """Wait up to ``timeout`` s for the trainer's plan (consumer side)."""
    path = plan_path(run_dir)
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"waited {timeout:g}s for the trainer's broadcast plan {path}: is the trainer running?")
        time.sleep(poll)
    return json.loads(path.read_text())


def clear_plan(run_dir: str | Path) -> None:
    plan_path(run_dir).unlink(missing_ok=True)
