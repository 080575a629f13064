"""Taskset contract: tasks, one rollout per call against an inference client, scoring."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import model_validator

from prl.config.base import _OWNERS, PluginConfigBase
from prl.contracts.base import Plugin
from prl.contracts.inference import InferenceClient
from prl.contracts.renderer import Renderer
from prl.types import Sampling, Trace


class TasksetConfig(PluginConfigBase):
    """Base of ``env.taskset`` variants, keyed by ``id``."""

    split: str | None = None
    """Data split this source reads (e.g. "test"); None: "train" for a train source and
    "eval" for an eval source."""

    @model_validator(mode="after")
    def _known_split(self) -> TasksetConfig:
        owner = _OWNERS.get(type(self))
        splits = getattr(owner, "splits", None)
        if self.split is not None and splits and self.split not in splits:
            raise ValueError(f"split '{self.split}' is not one of this taskset's splits: {', '.join(splits)}")
        return self

    def build(self) -> Taskset:
        """The taskset this config selects."""
        return super().build()


@dataclass
class Task:
    """One prompt/problem. ``data`` is taskset-specific (answer, game seed, ...)."""

    task_id: str
    prompt: list[dict[str, Any]]
    data: dict[str, Any] = field(default_factory=dict)


class Taskset(Plugin, ABC):
    """Tasks and rollouts. Exceptions inside ``rollout`` are recorded, never fatal."""

    id: ClassVar[str]
    Config: ClassVar[type[TasksetConfig]] = TasksetConfig
    # Offline tasksets run inside the orchestrator; remote ones behind `prl env-server`.
    in_process: ClassVar[bool] = True
    # The split names ``tasks`` accepts, checked when a config sets ``split``; None: any
    # name (a dataset-backed taskset learns its splits only when it loads the data).
    splits: ClassVar[tuple[str, ...] | None] = None
    # Its prompts carry image parts (OpenAI chat content): a run that trains on them needs a
    # vision-language model ([model.vlm]); one without is refused when its config resolves.
    sends_images: ClassVar[bool] = False

    def __init__(self, config: TasksetConfig) -> None:
        self.config = config

    @abstractmethod
    def tasks(self, split: str = "train") -> Iterator[Task]:
        """Tasks of ``split`` (``train`` or ``eval``), in a stable order."""

    @abstractmethod
    async def rollout(self, task: Task, client: InferenceClient, renderer: Renderer, sampling: Sampling) -> Trace:
        """Play one episode of ``task`` and return it scored (reward, metrics, branches)."""
