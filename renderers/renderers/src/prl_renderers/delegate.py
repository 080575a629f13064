"""A renderer that forwards every call to another renderer (``auto`` and ``custom``)."""

from __future__ import annotations

from typing import Any

from prl.contracts import Rendered, Renderer


class DelegatingRenderer(Renderer):
    """Forwards the whole renderer surface to ``self.inner``, set by the subclass."""

    inner: Renderer

    def render(
        self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False
    ) -> Rendered:
        return self.inner.render(messages, tools, add_generation_prompt)

    def render_ids(
        self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False
    ) -> list[int]:
        return self.inner.render_ids(messages, tools, add_generation_prompt)

    def parse_response(
        self, token_ids: list[int], tools: list[dict] | None = None, prompt_ids: list[int] | None = None
    ) -> dict[str, Any]:
        return self.inner.parse_response(token_ids, tools, prompt_ids)

    def get_stop_token_ids(self) -> list[int]:
        return self.inner.get_stop_token_ids()

    @property
    def is_prefix_stable(self) -> bool:
        return self.inner.is_prefix_stable

    def bridge_to_next_turn(
        self,
        prev_prompt_ids: list[int],
        prev_completion_ids: list[int],
        new_messages: list[dict],
        tools: list[dict] | None = None,
    ) -> list[int] | None:
        return self.inner.bridge_to_next_turn(prev_prompt_ids, prev_completion_ids, new_messages, tools)
