"""PPO: the clipped surrogate, token level, on a capped importance ratio.

Per rl token (``docs/algorithms.md``), with A′ = adv_tau · A and r̂ the importance ratio
p/q capped at ``max_importance_ratio`` (value capped, gradient still flows; see
:func:`prl_loss_common.capped_ratio`):

    loss_t = −w · min(A′ · r̂, A′ · clip(r̂, ratio_low, ratio_high))

The min picks the clipped branch exactly when the update would move r̂ further out of
[ratio_low, ratio_high] in the direction the advantage favours (A′ > 0 and r̂ > high, or
A′ < 0 and r̂ < low); there the gradient is 0. Elsewhere ∇loss_t = −w · A′ · r̂ · ∇log p.

Metrics over the rl tokens: ``is_clipped`` (fraction on the zero-gradient clipped branch)
and ``ratio_capped`` (fraction whose ratio exceeded ``max_importance_ratio``).
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

from prl_loss_common import capped_ratio, masked_fraction, rl_tokens, zero_where
from pydantic import Field, model_validator

from prl.contracts.loss import Loss, LossConfig, LossInputs, LossOutputs
from prl.lazy import lazy_import

torch = lazy_import("torch")  # registry loads must stay torch-free


class PPOLoss(Loss):
    """Token-level PPO clipped surrogate."""

    type: ClassVar[str] = "ppo"

    class Config(LossConfig):
        """``[trainer.loss] type = "ppo"``."""

        type: Literal["ppo"] = "ppo"
        """Selects this loss."""
        ratio_low: Annotated[float, Field(gt=0, le=1)] = 0.8
        """Lower clip of the ratio, in (0, 1]."""
        ratio_high: Annotated[float, Field(ge=1)] = 1.2
        """Upper clip of the ratio, at least 1."""
        max_importance_ratio: Annotated[float, Field(gt=0)] = 1e4
        """Cap on the value of the ratio; at least ratio_high."""
        adv_tau: float = 1.0
        """Multiplier on the advantage."""

        @model_validator(mode="after")
        def _cap(self):
            if self.max_importance_ratio < self.ratio_high:
                raise ValueError(
                    f"max_importance_ratio ({self.max_importance_ratio}) must be >= ratio_high ({self.ratio_high})"
                )
            return self

    config: Config

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        cfg = self.config
        active, weights, log_r = rl_tokens(inputs)
        ratio = capped_ratio(log_r, cfg.max_importance_ratio)
        advantage = cfg.adv_tau * inputs.advantages.detach()
        surrogate = torch.minimum(advantage * ratio, advantage * ratio.clamp(cfg.ratio_low, cfg.ratio_high))
        per_token = zero_where(active, -weights * surrogate)
        with torch.no_grad():
            r = log_r.detach()
            clipped = ((advantage > 0) & (r > math.log(cfg.ratio_high))) | (
                (advantage < 0) & (r < math.log(cfg.ratio_low))
            )
            capped = r > math.log(cfg.max_importance_ratio)
        metrics = {
            "is_clipped": masked_fraction(clipped, active),
            "ratio_capped": masked_fraction(capped, active),
        }
        return LossOutputs(loss=per_token, metrics=metrics)
