"""Loss contract: the trainer-side per-token rl loss (torch is imported by the plugin)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from prl.config.base import PluginConfigBase


class LossConfig(PluginConfigBase):
    """Base of ``[trainer.loss]`` variants."""


@dataclass
class LossInputs:
    """Token-aligned 1-D tensors for one packed micro-batch (or one sample)."""

    trainer_logprobs: Any
    inference_logprobs: Any
    advantages: Any
    loss_mask: Any
    rl_weights: Any
    ref_logprobs: Any = None
    # Sampling replay (top-p/top-k truncated sampling): [tokens, |S|] logprobs of every id in
    # the sampling mask, from the trainer and from the sampler (padding -inf).
    trainer_mask_logprobs: Any = None
    inference_mask_logprobs: Any = None


@dataclass
class LossOutputs:
    """``loss``: per-token rl loss, already multiplied by the rl weight (not normalised).

    ``metrics``: name to per-token tensor (averaged over masked tokens by the trainer) or
    scalar tensor.
    """

    loss: Any
    metrics: dict[str, Any] = field(default_factory=dict)


class Loss(ABC):
    """A policy loss. The trainer sums ``loss`` and divides by the global rl weight sum."""

    type: ClassVar[str]
    Config: ClassVar[type[LossConfig]] = LossConfig

    def __init__(self, config: LossConfig) -> None:
        self.config = config

    @abstractmethod
    def __call__(self, inputs: LossInputs) -> LossOutputs:
        """Per-token loss and metrics; gradients flow only through ``trainer_logprobs``."""
