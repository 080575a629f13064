"""Loss contract: the trainer-side per-token rl loss (torch is imported by the plugin)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from prl.config.base import PluginConfigBase
from prl.contracts.base import Plugin

if TYPE_CHECKING:  # the trainer passes torch tensors; core never imports torch
    from torch import Tensor


class LossConfig(PluginConfigBase):
    """Base of ``[trainer.loss]`` variants."""

    def build(self) -> Loss:
        """The loss this config selects."""
        return super().build()

    def sampling_mask_field(self) -> str | None:
        """The name of the field (under ``[trainer.loss]``) that makes this loss read the
        sampling-mask logprobs (``LossInputs.trainer_mask_logprobs`` /
        ``inference_mask_logprobs``), or None when it does not need them. ``prl rl`` then
        requires truncated train sampling from a backend that returns sampling masks, and
        names this field when it refuses a config. Default: None."""
        return None


@dataclass
class LossInputs:
    """Token-aligned 1-D tensors for one packed micro-batch (or one sample)."""

    trainer_logprobs: Tensor
    inference_logprobs: Tensor
    advantages: Tensor
    loss_mask: Tensor
    rl_weights: Tensor
    ref_logprobs: Tensor | None = None
    # Sampling replay (top-p/top-k truncated sampling): [tokens, |S|] logprobs of every id in
    # the sampling mask, from the trainer and from the sampler (padding -inf).
    trainer_mask_logprobs: Tensor | None = None
    inference_mask_logprobs: Tensor | None = None
    # Token counts of the samples packed one after another in this micro-batch (None: the
    # inputs are one sample). A loss that works per sample splits on them.
    seq_lens: list[int] | None = None
    # Per sample of ``seq_lens``: whether it has rl tokens (``loss_mask``), known on the host,
    # so a loss that works per sample can skip the others without reading a device tensor
    # (a read makes the host wait for the GPU). None: not given.
    rl_samples: list[bool] | None = None

    @property
    def loss_weights(self) -> Tensor:
        """The per-token rl weights, under the name the custom-loss contract gives them."""
        return self.rl_weights


@dataclass
class LossOutputs:
    """``loss``: per-token rl loss, already multiplied by the rl weight (not normalised).

    ``metrics``: name to per-token tensor (averaged over masked tokens by the trainer) or
    scalar tensor.
    """

    loss: Tensor
    metrics: dict[str, Tensor] = field(default_factory=dict)


class Loss(Plugin, ABC):
    """A policy loss. The trainer sums ``loss`` and divides by the global rl weight sum."""

    type: ClassVar[str]
    Config: ClassVar[type[LossConfig]] = LossConfig

    def __init__(self, config: LossConfig) -> None:
        self.config = config

    @abstractmethod
    def __call__(self, inputs: LossInputs) -> LossOutputs:
        """Per-token loss and metrics; gradients flow only through ``trainer_logprobs``.

        Called by the trainer once per packed micro-batch that holds rl tokens, with
        ``loss_mask`` narrowed to them; masked positions may hold ``-inf`` logprobs. Each
        metric is logged as ``loss/<name>``."""
