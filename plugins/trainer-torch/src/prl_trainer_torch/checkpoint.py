"""DCP checkpoints of the trainer: save, find, load.

Layout (``docs/checkpoints.md``): ``checkpoints/step_N/trainer/`` holds a torch DCP
checkpoint (``.metadata`` plus one ``__<rank>_0.distcp`` shard per rank) with the model,
optimizer, scheduler and ``progress = {step, total_tokens, total_samples}``; SFT adds
``trainer/dataloader/rank_<k>.pt``. Step directories, the completion marker, resume lookup
and retention are core's (:mod:`prl.layout`): once every rank's files are on disk, rank 0
marks the trainer's part of the step complete, and core reads nothing but that marker.
"""

from __future__ import annotations

import errno
import io
import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as tdist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from prl import layout
from prl.config.errors import ConfigError, HostError, host_error
from prl.fsutil import write_atomic
from prl_trainer_torch.lora import is_adapter_key

if TYPE_CHECKING:  # annotations only
    from prl.config.components import TrainerConfig
    from prl.config.roots import SFTConfig

SFT_PARTS = layout.COMPONENTS["sft"]
ADAPTER_CONFIG = "adapter_config.json"
FULL_BELOW = 1 << 20
"""A failed save with less than this free (or less than a checkpoint takes) is a full disk."""

# torch DCP warns on every save and load made without a process group. A trainer of one
# process (num_workers = 1, the CPU examples) never starts one, and a single-process
# checkpoint is exactly what it means to write: the shard and .metadata are the same as a
# one-rank group's, and resume and export read them back. So this one message is noise.
_NO_PROCESS_GROUP = r"torch\.distributed is disabled, unavailable or uninitialized, assuming the intent is to"


@contextmanager
def single_process_quiet() -> Iterator[None]:
    """Around ``dcp.save``/``dcp.load``: hide DCP's no-process-group UserWarning, only it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_PROCESS_GROUP, category=UserWarning)
        yield


def ckpt_root(config: TrainerConfig | SFTConfig, run_dir: Path) -> Path:
    return layout.checkpoint_root(config.ckpt, run_dir)


def complete_steps(root: Path) -> list[int]:
    """Steps under ``root`` whose trainer part is marked complete, ascending."""
    return layout.complete_steps(root, (layout.TRAINER,))


def resume_dir(config: TrainerConfig | SFTConfig, root: Path, complete_for: tuple[str, ...] = SFT_PARTS) -> Path | None:
    """The ``step_N`` directory a resume loads from, or None for a fresh start.

    ``--resume`` alone takes the newest step complete for ``complete_for`` (every part of the
    run); an explicit step or directory needs only the trainer's part."""
    return layout.find_resume(config.resume, root, complete_for, (layout.TRAINER,))


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
    adapter: dict | None = None,
) -> None:
    """Write the trainer checkpoint of one step and mark it complete (collective: every
    rank calls it).

    ``meta`` (model and tokenizer names) goes to ``trainer/model.json`` so an export needs
    nothing but the step directory. A LoRA run passes its ``adapter`` config: the model
    part then holds only the adapter's tensors (the frozen base is the model it names) and
    ``trainer/adapter_config.json`` marks the checkpoint as LoRA. A save the disk cannot hold raises
    :class:`prl.config.errors.HostError` (one line, no traceback) and leaves the step
    without its marker, so a resume takes the previous complete step.
    """
    try:
        _save(step_dir, hf_model, optimizer, scheduler, progress, loader_state, rank, meta, adapter)
    except (Exception, CheckpointException) as exc:  # torch's is a BaseException
        err = _disk_error(exc, step_dir, _estimate_bytes(hf_model))
        if err is None:
            raise
        raise err from exc


def _save(step_dir: Path, hf_model, optimizer, scheduler, progress, loader_state, rank, meta, adapter) -> None:
    trainer_dir = layout.component_dir(step_dir, layout.TRAINER)
    if rank == 0:
        layout.begin(step_dir, layout.TRAINER)
    if tdist.is_initialized() and tdist.get_world_size() > 1:
        tdist.barrier()  # no rank rewrites a shard while an old marker still vouches for it
    trainer_dir.mkdir(parents=True, exist_ok=True)
    if meta is not None and rank == 0:
        write_atomic(trainer_dir / "model.json", json.dumps(meta), fsync=True)
    if adapter is not None and rank == 0:
        write_atomic(trainer_dir / ADAPTER_CONFIG, json.dumps(adapter, indent=2), fsync=True)
    if loader_state is not None:
        buf = io.BytesIO()
        torch.save(loader_state, buf)
        write_atomic(trainer_dir / "dataloader" / f"rank_{rank}.pt", buf.getvalue(), fsync=True)
    state = {
        "model": _model_state(hf_model, adapter is not None),
        "optim": get_optimizer_state_dict(hf_model, optimizer, options=_options()),
        "scheduler": scheduler.state_dict(),
        "progress": dict(progress),
    }
    # DCP fsyncs every shard and ends in a collective that returns only after all ranks
    # wrote theirs (and rank 0 the .metadata); every rank's loader file came before it.
    # overwrite=True said outright: a resumed run saves its resume step again, and torch
    # plans to stop overwriting by default.
    # sync_files fsyncs every shard and the .metadata before dcp.save returns, which the
    # COMPLETE marker written next vouches for.
    writer = dcp.FileSystemWriter(str(trainer_dir), sync_files=True, overwrite=True)
    with single_process_quiet():
        dcp.save(state, storage_writer=writer)
    if rank == 0:
        layout.mark_complete(step_dir, layout.TRAINER)


def _estimate_bytes(hf_model) -> int:
    """About what one trainer checkpoint takes: the weights and two Adam moments."""
    return 3 * sum(p.numel() * p.element_size() for p in hf_model.parameters())


def _disk_error(exc: BaseException, step_dir: Path, need: int) -> HostError | None:
    """A one-line error when ``exc`` came from a full disk or an unwritable directory.

    torch reports a full disk in a shard as a bare RuntimeError (``unexpected pos``)
    wrapped in a CheckpointException, so the filesystem itself is asked what went wrong.
    """
    doing = f"writing checkpoint {step_dir}"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS):
        return host_error(exc, doing)
    try:
        stat = os.statvfs(step_dir if step_dir.exists() else step_dir.parent)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    # "unexpected pos" is torch's zip writer noticing a short write: the disk took less
    # than it was given.
    if free < max(FULL_BELOW, need) or "unexpected pos" in f"{exc} {exc!r}":
        return HostError(
            f"{doing}: no space left on device ({free // 1024} KiB free, a checkpoint takes about {need // 1024} KiB)"
        )
    return None


def _model_state(hf_model, adapter_only: bool) -> dict[str, Any]:
    state = get_model_state_dict(hf_model, options=_options())
    return {k: v for k, v in state.items() if is_adapter_key(k)} if adapter_only else state


def is_lora_checkpoint(step_dir: Path) -> bool:
    return (layout.component_dir(step_dir, layout.TRAINER) / ADAPTER_CONFIG).exists()


def load(step_dir: Path, hf_model, optimizer, scheduler, resume_cfg: Any, adapter_only: bool = False) -> dict:
    """Restore what ``resume_cfg`` does not skip; return the progress record (or zeros).
    ``adapter_only``: a LoRA run, whose checkpoint holds only the adapter's tensors."""
    if adapter_only and not is_lora_checkpoint(step_dir):
        raise ConfigError(f"resume: {step_dir} holds full weights but [model.lora] is set; remove it to resume")
    if not adapter_only and is_lora_checkpoint(step_dir):
        raise ConfigError(f"resume: {step_dir} is a LoRA checkpoint; set the run's [model.lora] to resume it")
    state: dict[str, Any] = {"model": _model_state(hf_model, adapter_only)}
    if not resume_cfg.skip_optimizer:
        state["optim"] = get_optimizer_state_dict(hf_model, optimizer, options=_options())
    if not resume_cfg.skip_scheduler:
        state["scheduler"] = scheduler.state_dict()
    if not resume_cfg.skip_progress:
        state["progress"] = {"step": 0, "total_tokens": 0, "total_samples": 0}
    with single_process_quiet():
        dcp.load(state, checkpoint_id=str(layout.component_dir(step_dir, layout.TRAINER)))
    set_model_state_dict(hf_model, state["model"], options=StateDictOptions(strict=not adapter_only))
    if "optim" in state:
        set_optimizer_state_dict(hf_model, optimizer, state["optim"], options=_options())
    if "scheduler" in state:
        scheduler.load_state_dict(state["scheduler"])
    return state.get("progress", {"step": 0, "total_tokens": 0, "total_samples": 0})


def model_state(hf_model, adapter_only: bool = False) -> dict[str, Any]:
    """The model's tensors as a checkpoint holds them (only the adapter's for a LoRA run)."""
    return _model_state(hf_model, adapter_only)


def read_model_state(step_dir: Path, hf_model, adapter_only: bool = False) -> dict[str, torch.Tensor]:
    """The model tensors saved in ``step_dir``, read into new tensors shaped like
    ``hf_model``'s (which is left untouched)."""
    model = {k: torch.empty_like(v) for k, v in _model_state(hf_model, adapter_only).items()}
    with single_process_quiet():
        dcp.load({"model": model}, checkpoint_id=str(layout.component_dir(step_dir, layout.TRAINER)))
    return model


def load_loader_state(step_dir: Path, rank: int) -> dict | None:
    """This rank's dataloader cursor; rank 0's when the world size changed."""
    base = layout.component_dir(step_dir, layout.TRAINER) / "dataloader"
    for name in (f"rank_{rank}.pt", "rank_0.pt"):
        if (base / name).exists():
            return torch.load(base / name, weights_only=True)
    return None
