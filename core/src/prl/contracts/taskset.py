"""Taskset contract: tasks, one rollout per call against an inference client, scoring."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from prl.config.base import PluginConfigBase
from prl.contracts.base import Plugin
from prl.contracts.inference import InferenceClient
from prl.contracts.renderer import Renderer
from prl.types import Sampling, Trace


class TasksetConfig(PluginConfigBase):
    """Base of ``env.taskset`` variants, keyed by ``id``."""

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

    def __init__(self, config: TasksetConfig) -> None:
        self.config = config

    @abstractmethod
    def tasks(self, split: str = "train") -> Iterator[Task]:
        """Tasks of ``split`` (``train`` or ``eval``), in a stable order."""

    @abstractmethod
    async def rollout(self, task: Task, client: InferenceClient, renderer: Renderer, sampling: Sampling) -> Trace:
        """Play one episode of ``task`` and return it scored (reward, metrics, branches)."""
