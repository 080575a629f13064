"""Trainer contract: core resolves the config and hands it to the registered trainer."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from prl.config.base import PluginConfigBase


class TrainerBackendConfig(PluginConfigBase):
    """Base of trainer implementation settings."""


class Trainer(ABC):
    """Runs SFT or RL training for a resolved config; owns checkpoints and export."""

    type: ClassVar[str]
    Config: ClassVar[type[TrainerBackendConfig]] = TrainerBackendConfig

    @classmethod
    @abstractmethod
    def run_sft(cls, config: Any) -> int:
        """Run SFT for a resolved ``SFTConfig`` (launching torchrun itself when the world
        size is above 1); return the exit code."""

    @classmethod
    @abstractmethod
    def run_rl(cls, config: Any) -> int:
        """Run the RL trainer for a resolved ``TrainerConfig``; return the exit code."""
