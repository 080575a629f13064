"""CISPO: clipped importance-sampling weight on the log-likelihood.

Per rl token (spec ``rl-loop.md`` §6), with A′ = adv_tau · A and r = p/q:

    loss_t = −w · sg(clip(r, ratio_low, ratio_high)) · A′ · log p

The clipped ratio is a constant weight, so ∇loss_t = −w · clip(r) · A′ · ∇log p: unlike PPO,
no token ever loses its gradient; clipping only bounds how much one token counts.
``ratio_low = 0`` means no lower clip.

Metric over the rl tokens: ``is_clipped`` (fraction whose ratio was clipped).
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

from prl.lazy import lazy_import

torch = lazy_import("torch")  # registry loads must stay torch-free
from prl.contracts.loss import Loss, LossConfig, LossInputs, LossOutputs
from prl_loss_common import log_ratio, masked_fraction, rl_mask, weights_or_ones, zero_where
from pydantic import Field, model_validator


class CISPOLoss(Loss):
    """Policy gradient on log p with a detached, clipped importance weight."""

    type: ClassVar[str] = "cispo"

    class Config(LossConfig):
        """``[trainer.loss] type = "cispo"``."""

        type: Literal["cispo"] = "cispo"
        """Selects this loss."""
        ratio_low: Annotated[float, Field(ge=0)] = 0.0
        """Lower clip of the importance weight (0: no lower clip)."""
        ratio_high: Annotated[float, Field(gt=0)] = 5.0
        """Upper clip of the importance weight."""
        adv_tau: float = 1.0
        """Multiplier on the advantage."""

        @model_validator(mode="after")
        def _band(self):
            if self.ratio_low > self.ratio_high:
                raise ValueError(
                    f"ratio_low ({self.ratio_low}) must be <= ratio_high ({self.ratio_high})"
                )
            return self

    config: Config

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        cfg = self.config
        logp = inputs.trainer_logprobs
        active = rl_mask(inputs.loss_mask, inputs.rl_weights)
        weights = weights_or_ones(inputs.rl_weights, logp)
        with torch.no_grad():
            log_r = zero_where(active, log_ratio(logp, inputs.inference_logprobs)).detach()
            high = math.log(cfg.ratio_high)
            low = math.log(cfg.ratio_low) if cfg.ratio_low > 0 else -math.inf
            coef = log_r.clamp(min=low, max=high).exp()
            clipped = (log_r > high) | (log_r < low)
        advantage = cfg.adv_tau * inputs.advantages.detach()
        per_token = zero_where(active, -weights * coef * advantage * zero_where(active, logp))
        return LossOutputs(loss=per_token, metrics={"is_clipped": masked_fraction(clipped, active)})
