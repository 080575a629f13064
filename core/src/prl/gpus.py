"""How many GPUs this machine gives a run, found without importing torch, and the check of
``[deployment]`` against it (run by ``prl rl`` / ``prl sft``, ``--dry-run`` included, when
the run starts here rather than in a batch scheduler's job).

The count, first that applies:

1. ``$PRL_GPU_COUNT`` (an integer): an override for machines where the others mislead;
2. ``$CUDA_VISIBLE_DEVICES`` when set: the devices listed (empty or ``-1``: none);
3. ``nvidia-smi -L``: one line per GPU; no nvidia-smi means no NVIDIA GPU (0).
"""

from __future__ import annotations

import os
import shutil
import subprocess

from prl.config.errors import ConfigError

COUNT_ENV = "PRL_GPU_COUNT"


def visible_gpus() -> tuple[int, str]:
    """(GPUs this process may use, how that was found)."""
    forced = os.environ.get(COUNT_ENV)
    if forced is not None:
        try:
            return int(forced), f"${COUNT_ENV}"
        except ValueError:
            raise ConfigError(f"${COUNT_ENV} must be an integer, got {forced!r}") from None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [d for d in visible.split(",") if d.strip()]
        if ids and ids[0].strip() == "-1":
            ids = []
        return len(ids), f"CUDA_VISIBLE_DEVICES={visible!r}"
    if shutil.which("nvidia-smi") is None:
        return 0, "no nvidia-smi on PATH"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 0, f"nvidia-smi -L failed: {exc}"
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()), "nvidia-smi -L"


def check_deployment(deployment) -> None:
    """A one-line ConfigError (exit 2) when the GPU ids ``deployment`` places processes on
    (:meth:`prl.contracts.launcher.LauncherConfig.gpu_ids`) are not all on this machine."""
    ids = deployment.gpu_ids()
    if not ids:
        return
    have, how = visible_gpus()
    if max(ids) < have:
        return
    train = getattr(deployment, "num_train_gpus", 0)
    infer = getattr(deployment, "num_infer_gpus", 0)
    raise ConfigError(
        f"--deployment.num-infer-gpus: num_infer_gpus ({infer}) + num_train_gpus ({train}) place processes on "
        f"GPU ids {_ranges(ids)}, but this machine has {have} GPU(s) ({how})"
    )


def _ranges(ids: set[int]) -> str:
    ordered = sorted(ids)
    return f"{ordered[0]}-{ordered[-1]}" if ordered == list(range(ordered[0], ordered[-1] + 1)) else str(ordered)
