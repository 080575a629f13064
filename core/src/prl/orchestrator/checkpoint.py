"""Orchestrator checkpoints: ``checkpoints/step_N/orchestrator/progress.pt``.

The file is JSON (the name follows ``docs/checkpoints.md``): progress counters, the env-mixing RNG and every
train source's sampler state. It is written to a temporary file, fsync-ed and renamed, and
only then is the orchestrator's part of the step marked complete (:mod:`prl.layout`), so a
crash leaves either the old state or the new one.

A save is due after shipping batch N when ``ckpt.interval`` divides N, and always at the
final step. Retention is the trainer's (master rank) job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prl import layout
from prl.config.errors import HostError, host_error
from prl.fsutil import write_atomic

if TYPE_CHECKING:  # annotations only
    from prl.config.components import OrchestratorConfig

FILE = "progress.pt"


def checkpoint_root(config: OrchestratorConfig, run_dir: Path) -> Path:
    return layout.checkpoint_root(getattr(config, "ckpt", None), run_dir)


def is_due(config: OrchestratorConfig, step: int) -> bool:
    final = config.max_steps is not None and step == config.max_steps
    return layout.save_due(getattr(config, "ckpt", None), step, final)


def save_state(root: Path, step: int, state: dict[str, Any]) -> Path:
    step_dir = layout.step_dir(root, step)
    try:
        path = layout.begin(step_dir, layout.ORCHESTRATOR) / FILE
        write_atomic(path, json.dumps(state), fsync=True)
        layout.mark_complete(step_dir, layout.ORCHESTRATOR)
    except OSError as exc:
        if isinstance(exc, HostError):
            raise
        raise host_error(exc, f"writing checkpoint {step_dir}") from None
    return path


def resume_dir(config: OrchestratorConfig, run_dir: Path) -> Path | None:
    """The ``step_N`` directory to resume from, or None for a fresh run.

    ``--resume`` alone takes the newest step both trainer and orchestrator completed, the
    one the trainer picks too."""
    root = checkpoint_root(config, run_dir)
    return layout.find_resume(getattr(config, "resume", None), root, layout.COMPONENTS["rl"], (layout.ORCHESTRATOR,))


def load_state(step_dir: Path) -> dict[str, Any]:
    path = layout.component_dir(step_dir, layout.ORCHESTRATOR) / FILE
    if not path.exists():
        raise FileNotFoundError(f"--resume: orchestrator state {path} is missing")
    with open(path) as fh:
        return json.load(fh)
