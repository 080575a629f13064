"""Orchestrator checkpoints: ``checkpoints/step_N/orchestrator/progress.pt``.

The file is JSON (the name is the spec's): progress counters, the env-mixing RNG and every
train source's sampler state. It is written to a temporary file, fsync-ed and renamed, so a
crash leaves either the old state or the new one.

A save is due after shipping batch N when ``ckpt.interval`` divides N, and always at the
final step. Retention is the trainer's (master rank) job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prl.fsutil import write_atomic

FILE = "progress.pt"


def checkpoint_root(config: Any, run_dir: Path) -> Path:
    ckpt = getattr(config, "ckpt", None)
    if ckpt is not None and ckpt.output_dir is not None:
        return Path(ckpt.output_dir)
    return Path(run_dir) / "checkpoints"


def is_due(config: Any, step: int) -> bool:
    ckpt = getattr(config, "ckpt", None)
    if ckpt is None:
        return False
    if config.max_steps is not None and step == config.max_steps:
        return True
    return ckpt.interval is not None and step % ckpt.interval == 0


def save_state(root: Path, step: int, state: dict[str, Any]) -> Path:
    return write_atomic(Path(root) / f"step_{step}" / "orchestrator" / FILE, json.dumps(state), fsync=True)


def resume_dir(config: Any, run_dir: Path) -> Path | None:
    """The ``step_N`` directory to resume from, or None for a fresh run."""
    resume = getattr(config, "resume", None)
    if resume is None:
        return None
    if resume.dir is not None:
        return Path(resume.dir)
    root = checkpoint_root(config, run_dir)
    if resume.step is not None:
        return root / f"step_{resume.step}"
    steps = sorted(
        int(p.name[5:])
        for p in root.glob("step_*")
        if p.name[5:].isdigit() and (p / "orchestrator" / FILE).exists() and (p / "trainer" / ".metadata").exists()
    )
    if not steps:
        raise FileNotFoundError(
            f"--resume: no complete checkpoint (trainer/.metadata and orchestrator/{FILE}) in {root}"
        )
    return root / f"step_{steps[-1]}"


def load_state(step_dir: Path) -> dict[str, Any]:
    path = Path(step_dir) / "orchestrator" / FILE
    if not path.exists():
        raise FileNotFoundError(f"--resume: orchestrator state {path} is missing")
    with open(path) as fh:
        return json.load(fh)
