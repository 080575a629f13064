"""Schema hook composing the sections a trainer plugin owns into the root configs.

``trainer.model``, ``trainer.optim`` and ``trainer.scheduler`` (``prl sft``: ``model``,
``optim``, ``scheduler``, and ``loss``) take the classes the installed default trainer
declares on its :class:`prl.contracts.trainer.Trainer` (``ModelConfig``, ``OptimConfig``,
``SchedulerConfig``, ``SFTLossConfig``); with no trainer installed they are core's bases
(:mod:`prl.config.policy`). Configs are rebuilt when plugins register, like plugin unions.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from prl.config.base import ComposedSection, PrlModel
from prl.config.policy import TrainerModelConfig, TrainerOptimConfig, TrainerSchedulerConfig, TrainerSFTLossConfig

_BASES: dict[str, type[PrlModel]] = {
    "model": TrainerModelConfig,
    "optim": TrainerOptimConfig,
    "scheduler": TrainerSchedulerConfig,
    "loss": TrainerSFTLossConfig,
}
_ATTRS = {"model": "ModelConfig", "optim": "OptimConfig", "scheduler": "SchedulerConfig", "loss": "SFTLossConfig"}


class TrainerSection(ComposedSection):
    """Schema hook for a section a trainer plugin owns (``model``, ``optim``, ``scheduler``,
    ``loss``): the class the installed default trainer declares for it, else core's base."""

    def __init__(self, name: str) -> None:
        self.name = name

    def model(self) -> type[PrlModel]:
        from prl.plugins import get_registry

        registry = get_registry()
        tag = registry.default_tag("trainers")
        if tag is None:
            return _BASES[self.name]
        return getattr(registry.get("trainers", tag), _ATTRS[self.name])

    def default(self) -> PrlModel:
        return self.model()()


TrainerModel = Annotated[TrainerModelConfig, TrainerSection("model")]
"""Field type of ``trainer.model`` (``prl sft``: ``model``): the default trainer's class."""
TrainerOptim = Annotated[TrainerOptimConfig, TrainerSection("optim")]
"""Field type of ``trainer.optim``."""
TrainerScheduler = Annotated[TrainerSchedulerConfig, TrainerSection("scheduler")]
"""Field type of ``trainer.scheduler``."""
TrainerSFTLoss = Annotated[TrainerSFTLossConfig, TrainerSection("loss")]
"""Field type of ``prl sft``'s ``loss``."""


def trainer_default(name: str) -> Any:
    """The field default of a trainer-owned section: the trainer's class with its defaults."""
    return Field(default_factory=TrainerSection(name).default)


def check_selected(tag: str, sections: dict[str, Any]) -> None:
    """The sections are the default trainer's classes: a selected trainer that declares
    other ones cannot read them, so it must be the installed default (ValueError)."""
    from prl.plugins import get_registry

    cls = get_registry().classes("trainers").get(tag)
    for name, value in sections.items():
        want = getattr(cls, _ATTRS[name], None)
        if want is not None and not isinstance(value, want):
            raise ValueError(
                f"trainer '{tag}' declares its own {name} settings ({want.__name__}), but they are read from "
                f"the installed default trainer; make '{tag}' the default (is_default = True) to select it"
            )
