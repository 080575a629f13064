"""Algorithm contract: advantages and loss-component weights for a group of traces."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from prl.config.base import PluginConfigBase
from prl.contracts.base import Plugin
from prl.types import Trace


class AlgorithmConfig(PluginConfigBase):
    """Base of ``[orchestrator.train.algo]`` variants."""

    def build(self) -> Algorithm:
        """The algorithm this config selects."""
        return super().build()


class Algorithm(Plugin, ABC):
    """Turns a scored group into per-token advantages and rl/ce/ref_kl weights.

    ``sampling_source`` is ``"policy"`` unless the algorithm samples from a frozen model
    (then a ``{name, base_url}`` dict). Algorithms using rl or ref_kl must sample from the
    policy.
    """

    type: ClassVar[str]
    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig

    def __init__(self, config: AlgorithmConfig) -> None:
        self.config = config

    def sampling_source(self) -> str | dict:
        return "policy"

    @abstractmethod
    def score_group(self, group: list[Trace]) -> None:
        """Fill ``advantages`` and ``{rl,ce,ref_kl}_weights`` on every branch of ``group``.

        Non-sampled tokens (prompt, env observations) get weight 0 unless the algorithm
        trains on them on purpose.
        """
