"""The ``torch`` trainer plugin: runs SFT and RL in-process or under a torchrun it starts itself.

Users never call torchrun: with ``num_workers > 1`` the trainer writes the resolved config
as JSON, starts ``torchrun --nproc-per-node num_workers -m prl_trainer_torch.sft <json>``
and returns its exit code. Each rank reads only that JSON. Per-rank logs go under
``$PRL_ATTEMPT_LOG_DIR/trainer/torchrun`` when the launcher sets that variable.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, ClassVar, Literal

from prl.contracts.trainer import Trainer, TrainerBackendConfig


def torchrun_command(config_path: Path, nproc: int, log_dir: str | None, module: str = "prl_trainer_torch.sft") -> list[str]:
    cmd = [sys.executable, "-m", "prl_trainer_torch.torchrun", "--standalone", f"--nproc-per-node={nproc}"]
    if log_dir:
        # --tee keeps the ranks' output on the console as well as in the per-rank files.
        cmd += ["--log-dir", str(Path(log_dir) / "trainer" / "torchrun"), "--redirects=3", "--tee=3"]
    return cmd + ["-m", module, str(config_path)]


def launch_torchrun(config: Any) -> int:
    """Start one process per worker on this host and wait for them."""
    with tempfile.TemporaryDirectory(prefix="prl-sft-") as tmp:
        path = Path(tmp) / "sft.json"
        # Fake data renders nothing, so a run without any renderer installed still starts.
        uses_renderer = config.data.type != "fake" or (config.val is not None and config.val.data.type != "fake")
        path.write_text(config.model_dump_json(exclude=None if uses_renderer else {"renderer"}))
        env = dict(os.environ)
        # Keep NVLink multicast off in the children too (shared GPUs can be hung by it).
        env.setdefault("NCCL_NVLS_ENABLE", "0")
        cmd = torchrun_command(path, config.num_workers, os.environ.get("PRL_ATTEMPT_LOG_DIR"))
        return subprocess.call(cmd, env=env)


def launch_rl_torchrun(config: Any) -> int:
    """``prl trainer`` called directly with num_workers > 1 (``prl rl`` starts torchrun itself)."""
    with tempfile.TemporaryDirectory(prefix="prl-rl-") as tmp:
        path = Path(tmp) / "trainer.json"
        path.write_text(config.model_dump_json())
        env = dict(os.environ)
        env.setdefault("NCCL_NVLS_ENABLE", "0")
        cmd = torchrun_command(path, config.num_workers, os.environ.get("PRL_ATTEMPT_LOG_DIR"), "prl_trainer_torch.rl")
        return subprocess.call(cmd, env=env)


class TorchTrainer(Trainer):
    """FSDP2 trainer on transformers models; SFT now, the RL step reuses its parts."""

    type: ClassVar[str] = "torch"

    class Config(TrainerBackendConfig):
        """Settings of the torch trainer."""

        type: Literal["torch"] = "torch"
        """Trainer plugin tag."""

    @classmethod
    def run_sft(cls, config: Any) -> int:
        inside_torchrun = "LOCAL_RANK" in os.environ
        if config.num_workers > 1 and not inside_torchrun:
            return launch_torchrun(config)
        from prl_trainer_torch.sft import run

        return run(config)

    @classmethod
    def run_rl(cls, config: Any) -> int:
        inside_torchrun = "LOCAL_RANK" in os.environ
        if config.num_workers > 1 and not inside_torchrun:
            return launch_rl_torchrun(config)
        from prl_trainer_torch.rl import run

        return run(config)
