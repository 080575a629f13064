"""Renderer contract: messages to token ids with per-token role attribution, and back."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from prl.config.base import PluginConfigBase
from prl.contracts.base import Plugin


class RendererConfig(PluginConfigBase):
    """Base of ``[renderer]`` variants, keyed by ``name``."""

    def build(self, *, tokenizer: str) -> Renderer:
        """The renderer this config selects, for the tokenizer at ``tokenizer`` (a path or
        model directory)."""
        return super().build(tokenizer=tokenizer)

    def check(self, model: str) -> None:
        """Say before anything starts (``--dry-run`` included) whether this renderer can
        serve ``model`` (a local directory or a hub id; nothing may be downloaded). Raise
        ValueError with a one-line reason when it cannot; the command prints it naming the
        renderer's flag and exits 2. The default accepts every model."""


@dataclass
class Rendered:
    """Token ids with, for each token, the index and role of the message it came from.

    ``message_index`` is -1 and ``roles`` is ``"template"`` for tokens the template adds
    between messages (and for the generation prompt).
    """

    token_ids: list[int]
    message_index: list[int]
    roles: list[str]


class Renderer(Plugin, ABC):
    """Converts between chat messages and tokens for one model family."""

    name: ClassVar[str]
    Config: ClassVar[type[RendererConfig]] = RendererConfig

    def __init__(self, config: RendererConfig, tokenizer: str) -> None:
        self.config = config
        self.tokenizer_path = tokenizer

    @abstractmethod
    def render(
        self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False
    ) -> Rendered:
        """Render messages; every token is attributed to a message and its role."""

    def render_ids(
        self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False
    ) -> list[int]:
        return self.render(messages, tools, add_generation_prompt).token_ids

    @abstractmethod
    def parse_response(
        self, token_ids: list[int], tools: list[dict] | None = None, prompt_ids: list[int] | None = None
    ) -> dict[str, Any]:
        """Generated tokens to an assistant message: content, reasoning_content, tool_calls."""

    @abstractmethod
    def get_stop_token_ids(self) -> list[int]:
        """Token ids that end an assistant turn."""

    @property
    def is_prefix_stable(self) -> bool:
        return False

    def bridge_to_next_turn(
        self,
        prev_prompt_ids: list[int],
        prev_completion_ids: list[int],
        new_messages: list[dict],
        tools: list[dict] | None = None,
    ) -> list[int] | None:
        """Ids to append after a sampled turn for ``new_messages`` (plus a generation prompt).

        None means the caller must re-render from scratch, which starts a new branch.
        """
        return None
