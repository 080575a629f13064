"""Trainer contract: core resolves the config and hands it to the registered trainer.

Under ``prl rl`` the trainer also says which process(es) run it (:meth:`Trainer.rl_processes`):
one ``prl trainer`` by default, or whatever the plugin needs for several workers (the torch
trainer starts torchrun). The launcher starts what it is given; core names no launcher of
distributed jobs.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from prl.config.base import PluginConfigBase, PrlModel
from prl.config.policy import TrainerModelConfig, TrainerOptimConfig, TrainerSchedulerConfig, TrainerSFTLossConfig
from prl.contracts.base import Plugin
from prl.contracts.launcher import ProcessSpec

# Root configs are typed by their common base here: the root config modules compose plugin
# unions from the registry, which imports these contracts, so naming them (even for type
# checking only) would close an import circle.


class TrainerBackendConfig(PluginConfigBase):
    """Base of trainer implementation settings."""


class Trainer(Plugin, ABC):
    """Runs SFT or RL training for a resolved config; owns checkpoints and export."""

    type: ClassVar[str]
    Config: ClassVar[type[TrainerBackendConfig]] = TrainerBackendConfig
    # The sections this trainer reads, composed into ``trainer.model``/``optim``/``scheduler``
    # (``prl sft``: ``model``/``optim``/``scheduler``/``loss``) from the installed default trainer.
    ModelConfig: ClassVar[type[TrainerModelConfig]] = TrainerModelConfig
    OptimConfig: ClassVar[type[TrainerOptimConfig]] = TrainerOptimConfig
    SchedulerConfig: ClassVar[type[TrainerSchedulerConfig]] = TrainerSchedulerConfig
    SFTLossConfig: ClassVar[type[TrainerSFTLossConfig]] = TrainerSFTLossConfig

    @classmethod
    @abstractmethod
    def run_sft(cls, config: PrlModel) -> int:
        """Run SFT for a resolved :class:`prl.config.roots.SFTConfig` (launching its own
        workers when the world size is above 1); return the exit code (2 for a usage or
        data error)."""

    @classmethod
    @abstractmethod
    def run_rl(cls, config: PrlModel) -> int:
        """Run the RL trainer for a resolved :class:`prl.config.components.TrainerConfig`;
        return the exit code.

        Publish the weights as version ``start - 1`` through ``config.weight_broadcast``,
        then per step S: receive batch S from the rollout transport
        (:func:`prl.orchestrator.rollout.open_receiver`), train on it with
        ``config.loss``, publish version S, log to the monitors and save a checkpoint when
        due; return 0 after ``max_steps`` (``docs/plugin-contracts.md``)."""

    @classmethod
    def rl_processes(cls, config: PrlModel, config_file: Path, log_dir: Path, env: dict[str, str]) -> list[ProcessSpec]:
        """The process(es) ``prl rl`` starts for this trainer.

        Args:
            config: the resolved :class:`prl.config.components.TrainerConfig` (also
                written to ``config_file``).
            config_file: the resolved ``trainer.json`` every trainer process reads.
            log_dir: this attempt's log directory (``logs/attempt_N``).
            env: environment additions shared by every child of the run.

        Returns:
            By default one ``prl trainer @ config_file`` process with role ``trainer``. A
            trainer that runs several workers returns its own launch (e.g. torchrun) here; a
            worker's exit code 2 (usage error) must come back as the process's exit code.
        """
        argv = [sys.executable, "-m", "prl", "trainer", "@", str(config_file)]
        return [ProcessSpec("trainer", argv, Path(log_dir) / "trainer.log", dict(env), role="trainer")]
