"""Inference backend contract and the client protocol tasksets use."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Protocol

from prl.config.base import PluginConfigBase
from prl.types import Generation, Sampling


class InferenceBackendConfig(PluginConfigBase):
    """Base of ``[inference.backend]`` variants."""


class InferenceBackend(ABC):
    """Serves the HTTP contract of spec/rl-loop.md §1 until stopped."""

    type: ClassVar[str]
    Config: ClassVar[type[InferenceBackendConfig]] = InferenceBackendConfig

    def __init__(self, config: Any) -> None:
        """``config`` is the whole resolved InferenceConfig (model, server, backend)."""
        self.config = config

    @abstractmethod
    def serve(self) -> None:
        """Bind ``config.server.host:port`` and serve until SIGTERM/SIGINT."""


class InferenceClient(Protocol):
    """What a taskset sees of the inference server during a rollout."""

    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        """Token-in/token-out sampling with per-token logprobs."""
        ...

    async def chat(self, messages: list[dict], sampling: Sampling) -> dict[str, Any]:
        """OpenAI-style chat completion (frozen models, evals)."""
        ...
