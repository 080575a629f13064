"""trainer.model / optim / scheduler (and prl sft's loss) come from the trainer plugin, found through
the registry."""

from __future__ import annotations

from typing import ClassVar, Literal

import pytest
from pydantic import ValidationError

from prl import hookimpl
from prl.config.components import TrainerConfig
from prl.config.policy import TrainerModelConfig
from prl.config.roots import SFTConfig
from prl.contracts.trainer import Trainer, TrainerBackendConfig
from prl.plugins import get_registry


class _WideModel(TrainerModelConfig):
    widen: int = 1


class _OwnTrainer(Trainer):
    """A non-default trainer with a model section of its own."""

    type: ClassVar[str] = "own-sections"
    ModelConfig = _WideModel

    class Config(TrainerBackendConfig):
        type: Literal["own-sections"] = "own-sections"

    @classmethod
    def run_sft(cls, config) -> int:
        return 0

    @classmethod
    def run_rl(cls, config) -> int:
        return 0


class _BaseTrainer(_OwnTrainer):
    """A non-default trainer that reads only the sections core defines."""

    type: ClassVar[str] = "base-sections"
    ModelConfig = TrainerModelConfig

    class Config(TrainerBackendConfig):
        type: Literal["base-sections"] = "base-sections"


class _Plugin:
    @hookimpl
    def prl_register_trainers(self):
        return [_OwnTrainer, _BaseTrainer]


def test_sections_are_the_default_trainers_classes():
    default = get_registry().default_tag("trainers")
    if default is None:
        pytest.skip("no trainer installed")
    cls = get_registry().get("trainers", default)
    config = TrainerConfig()
    assert type(config.model) is cls.ModelConfig and type(config.optim) is cls.OptimConfig
    assert type(SFTConfig().scheduler) is cls.SchedulerConfig and type(SFTConfig().loss) is cls.SFTLossConfig


def test_a_selected_trainer_with_its_own_sections_must_be_the_default(register_plugin):
    if get_registry().default_tag("trainers") is None:
        pytest.skip("no default trainer installed")
    register_plugin(_Plugin(), "sections-plugin", "prl-sections-dist")
    with pytest.raises(ValidationError, match="trainer 'own-sections' declares its own model settings"):
        TrainerConfig.model_validate({"type": "own-sections"})
    with pytest.raises(ValidationError, match="make 'own-sections' the default"):
        SFTConfig.model_validate({"trainer_type": "own-sections"})
    # core's own section classes: the default trainer's settings are read as those
    assert TrainerConfig.model_validate({"type": "base-sections", "model": {"seq_len": 64}}).model.seq_len == 64
