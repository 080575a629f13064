"""The ``torch`` trainer plugin: runs SFT and RL in-process or under a torchrun it starts itself.

Users never call torchrun: with ``num_workers > 1`` the trainer writes the resolved config
as JSON, starts ``torchrun --nproc-per-node num_workers -m prl_trainer_torch.sft <json>``
(``.rl`` for RL; through :mod:`prl.torchrun`, which keeps a rank's one-line
usage error free of torchrun's traceback) and returns its exit code. Each rank reads only
that JSON. Per-rank logs go under
``$PRL_ATTEMPT_LOG_DIR/trainer/torchrun`` when the launcher sets that variable.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from prl import torchrun
from prl.contracts.launcher import ProcessSpec
from prl.contracts.trainer import Trainer, TrainerBackendConfig
from prl_trainer_torch import config

if TYPE_CHECKING:
    from prl.config.components import TrainerConfig
    from prl.config.roots import SFTConfig


def torchrun_command(config_path: Path, nproc: int, log_dir: str | None, module: str) -> list[str]:
    logs = Path(log_dir) / "trainer" / "torchrun" if log_dir else None
    return torchrun.command(["-m", module, str(config_path)], nproc=nproc, log_dir=logs)


def launch_torchrun(config_json: str, nproc: int, module: str) -> int:
    """Start ``nproc`` ranks of ``module`` on this host, each reading ``config_json``, and
    wait for them."""
    with tempfile.TemporaryDirectory(prefix="prl-trainer-") as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(config_json)
        env = dict(os.environ)
        # Keep NVLink multicast off in the children too (shared GPUs can be hung by it).
        env.setdefault("NCCL_NVLS_ENABLE", "0")
        return subprocess.call(torchrun_command(path, nproc, os.environ.get("PRL_ATTEMPT_LOG_DIR"), module), env=env)


def _sft_json(config: SFTConfig) -> str:
    # Fake data renders nothing, so a run without any renderer installed still starts.
    uses_renderer = config.data.type != "fake" or (config.val is not None and config.val.data.type != "fake")
    return config.model_dump_json(exclude=None if uses_renderer else {"renderer"})


def _needs_torchrun(config: SFTConfig | TrainerConfig) -> bool:
    """Several workers asked for, and not already a torchrun rank."""
    return config.num_workers > 1 and "LOCAL_RANK" not in os.environ


class TorchTrainer(Trainer):
    """FSDP2 trainer on transformers models; SFT now, the RL step reuses its parts."""

    type: ClassVar[str] = "torch"
    is_default: ClassVar[bool] = True

    class Config(TrainerBackendConfig):
        """Settings of the torch trainer."""

        type: Literal["torch"] = "torch"
        """Trainer plugin tag."""

    ModelConfig = config.ModelTrainConfig
    OptimConfig = config.OptimConfig
    SchedulerConfig = config.SchedulerConfig
    SFTLossConfig = config.SFTLossConfig

    @classmethod
    def run_sft(cls, config: SFTConfig) -> int:
        # [model.vlm] trains the whole image-text model on rows with images
        module = "prl_trainer_torch.vision_sft" if config.model.vlm is not None else "prl_trainer_torch.sft"
        if _needs_torchrun(config):
            return launch_torchrun(_sft_json(config), config.num_workers, module)
        return importlib.import_module(module).run(config)

    @classmethod
    def rl_processes(
        cls, config: TrainerConfig, config_file: Path, log_dir: Path, env: dict[str, str]
    ) -> list[ProcessSpec]:
        """One ``prl trainer`` process, or torchrun with ``num_workers`` ranks of
        :mod:`prl_trainer_torch.rl` reading ``config_file`` (per-rank logs under
        ``log_dir/trainer/torchrun``; a rank's exit 2 stays 2)."""
        if config.num_workers <= 1:
            return super().rl_processes(config, config_file, log_dir, env)
        argv = torchrun_command(Path(config_file), config.num_workers, str(log_dir), "prl_trainer_torch.rl")
        env = {**env, "NCCL_NVLS_ENABLE": env.get("NCCL_NVLS_ENABLE", "0")}
        return [ProcessSpec("trainer", argv, Path(log_dir) / "trainer.log", env, role="trainer")]

    @classmethod
    def run_rl(cls, config: TrainerConfig) -> int:
        if _needs_torchrun(config):
            # ``prl trainer`` called directly (under ``prl rl``, rl_processes starts torchrun).
            return launch_torchrun(config.model_dump_json(), config.num_workers, "prl_trainer_torch.rl")
        from prl_trainer_torch.rl import run

        return run(config)
