"""A dataset's ``reasoning_effort`` column sets the renderer's field of that name per row
without any ``data.columns`` entry."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Literal

from prl_trainer_torch.data import RowRenderer

from prl.config.roots import SFTDataConfig
from prl.contracts.renderer import RendererConfig


class ThinkingConfig(RendererConfig):
    name: Literal["thinking-test"] = "thinking-test"
    reasoning_effort: str | None = None

    def build(self, *, tokenizer: str):
        return NS(effort=self.reasoning_effort)


def test_the_reasoning_effort_column_reaches_the_renderer_by_default():
    rr = RowRenderer(SFTDataConfig(name="unused"), ThinkingConfig(), "unused")
    assert rr.renderer_for({"reasoning_effort": "high"}).effort == "high"
    assert rr.renderer_for({}).effort is None
