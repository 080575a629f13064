"""Fake plugins for tests (llm-echo style): tags no real plugin uses, so a test behaves the
same whichever distributions are installed. Register with the ``register_plugin`` fixture."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from prl import hookimpl
from prl.contracts import Loss, LossConfig, Taskset, TasksetConfig


class FakeLoss(Loss):
    type = "fake_loss"

    class Config(LossConfig):
        type: Literal["fake_loss"] = "fake_loss"
        """Tag."""
        eps: float = Field(0.5, gt=0)
        """A positive knob."""

    def __call__(self, inputs):  # pragma: no cover - config tests only
        raise NotImplementedError


class OtherFakeLoss(Loss):
    type = "other_fake_loss"

    class Config(LossConfig):
        type: Literal["other_fake_loss"] = "other_fake_loss"
        """Tag."""
        ratio_low: float = 0.8
        """Lower clip."""

    def __call__(self, inputs):  # pragma: no cover
        raise NotImplementedError


class FakeTaskset(Taskset):
    id = "fake-tasks"

    class Config(TasksetConfig):
        id: Literal["fake-tasks"] = "fake-tasks"
        """Tag."""
        size: int = 4
        """Number of tasks."""

    def tasks(self, split="train"):  # pragma: no cover
        return iter([])

    async def rollout(self, task, client, renderer, sampling):  # pragma: no cover
        raise NotImplementedError


class FakePlugin:
    @hookimpl
    def prl_register_losses(self):
        return [FakeLoss, OtherFakeLoss]

    @hookimpl
    def prl_register_tasksets(self):
        return [FakeTaskset]


class DuplicatePlugin:
    @hookimpl
    def prl_register_losses(self):
        return [FakeLoss]
