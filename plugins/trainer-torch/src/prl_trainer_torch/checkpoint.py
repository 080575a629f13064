"""DCP checkpoints of the trainer: save, find, load, retention.

Layout (runs-and-artifacts §3): ``checkpoints/step_N/trainer/`` holds a torch DCP
checkpoint (``.metadata`` plus one ``__<rank>_0.distcp`` shard per rank) with the model,
optimizer, scheduler and ``progress = {step, total_tokens, total_samples}``; SFT adds
``trainer/dataloader/rank_<k>.pt``. DCP writes ``.metadata`` last, so a step is complete
exactly when that file exists; the dataloader files are written before it.

Retention keeps the union of the newest ``keep_last`` steps and every multiple of
``keep_interval`` and deletes every other ``step_*`` directory; with both unset nothing
is ever deleted.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

STEP_RE = re.compile(r"^step_(\d+)$")


def ckpt_root(config: Any, run_dir: Path) -> Path:
    out = config.ckpt.output_dir if config.ckpt is not None and config.ckpt.output_dir else None
    return Path(out) if out else run_dir / "checkpoints"


def complete_steps(root: Path) -> list[int]:
    """Steps under ``root`` whose trainer checkpoint is complete, ascending."""
    if not root.is_dir():
        return []
    steps = []
    for d in root.iterdir():
        m = STEP_RE.match(d.name)
        if m and (d / "trainer" / ".metadata").exists():
            steps.append(int(m.group(1)))
    return sorted(steps)


def resume_dir(config: Any, root: Path) -> Path | None:
    """The ``step_N`` directory a resume loads from, or None for a fresh start."""
    res = config.resume
    if res is None:
        return None
    if res.dir is not None:
        path = Path(res.dir)
        if not (path / "trainer" / ".metadata").exists():
            raise FileNotFoundError(f"resume.dir: no complete trainer checkpoint at {path}")
        return path
    if res.step is not None:
        path = root / f"step_{res.step}"
        if not (path / "trainer" / ".metadata").exists():
            raise FileNotFoundError(f"resume.step: no complete checkpoint for step {res.step} under {root}")
        return path
    steps = complete_steps(root)
    if not steps:
        raise FileNotFoundError(f"--resume: no complete checkpoint under {root}")
    return root / f"step_{steps[-1]}"


def _options(full: bool = False) -> StateDictOptions:
    return StateDictOptions(full_state_dict=full, cpu_offload=full)


def save(
    step_dir: Path,
    hf_model,
    optimizer,
    scheduler,
    progress: dict,
    loader_state: dict | None,
    rank: int,
    meta: dict | None = None,
) -> None:
    """Write the trainer checkpoint of one step (collective: every rank calls it).

    ``meta`` (model and tokenizer names) goes to ``trainer/model.json`` so an export needs
    nothing but the step directory.
    """
    trainer_dir = step_dir / "trainer"
    trainer_dir.mkdir(parents=True, exist_ok=True)
    if meta is not None and rank == 0:
        (trainer_dir / "model.json").write_text(json.dumps(meta))
    if loader_state is not None:
        (trainer_dir / "dataloader").mkdir(parents=True, exist_ok=True)
        torch.save(loader_state, trainer_dir / "dataloader" / f"rank_{rank}.pt")
    state = {
        "model": get_model_state_dict(hf_model, options=_options()),
        "optim": get_optimizer_state_dict(hf_model, optimizer, options=_options()),
        "scheduler": scheduler.state_dict(),
        "progress": dict(progress),
    }
    dcp.save(state, checkpoint_id=str(trainer_dir))


def load(step_dir: Path, hf_model, optimizer, scheduler, resume_cfg: Any) -> dict:
    """Restore what ``resume_cfg`` does not skip; return the progress record (or zeros)."""
    state: dict[str, Any] = {"model": get_model_state_dict(hf_model, options=_options())}
    if not resume_cfg.skip_optimizer:
        state["optim"] = get_optimizer_state_dict(hf_model, optimizer, options=_options())
    if not resume_cfg.skip_scheduler:
        state["scheduler"] = scheduler.state_dict()
    if not resume_cfg.skip_progress:
        state["progress"] = {"step": 0, "total_tokens": 0, "total_samples": 0}
    dcp.load(state, checkpoint_id=str(step_dir / "trainer"))
    set_model_state_dict(hf_model, state["model"], options=_options())
    if "optim" in state:
        set_optimizer_state_dict(hf_model, optimizer, state["optim"], options=_options())
    if "scheduler" in state:
        scheduler.load_state_dict(state["scheduler"])
    return state.get("progress", {"step": 0, "total_tokens": 0, "total_samples": 0})


def load_loader_state(step_dir: Path, rank: int) -> dict | None:
    """This rank's dataloader cursor; rank 0's when the world size changed."""
    base = step_dir / "trainer" / "dataloader"
    for name in (f"rank_{rank}.pt", "rank_0.pt"):
        if (base / name).exists():
            return torch.load(base / name, weights_only=True)
    return None


def retain(root: Path, keep_last: int | None, keep_interval: int | None) -> list[int]:
    """Delete step directories outside the retention set; return the deleted steps."""
    if keep_last is None and keep_interval is None:
        return []
    steps = sorted(int(m.group(1)) for d in root.iterdir() if (m := STEP_RE.match(d.name)))
    keep = set(steps[-keep_last:]) if keep_last else set()
    if keep_interval:
        keep |= {s for s in steps if s % keep_interval == 0}
    gone = [s for s in steps if s not in keep]
    for s in gone:
        shutil.rmtree(root / f"step_{s}", ignore_errors=True)
    return gone


def save_due(step: int, final: bool, ckpt_cfg: Any) -> bool:
    """Interval saves skip the last step; the final step is always saved."""
    if ckpt_cfg is None:
        return False
    if final:
        return True
    return ckpt_cfg.interval is not None and step % ckpt_cfg.interval == 0
