"""CISPO: clipped importance-sampling weight on the log-likelihood.

Per rl token (``docs/algorithms.md``), with A′ = adv_tau · A and r = p/q:

    loss_t = −w · sg(clip(r, ratio_low, ratio_high)) · A′ · log p

The clipped ratio is a constant weight, so ∇loss_t = −w · clip(r) · A′ · ∇log p: unlike PPO,
no token ever loses its gradient; clipping only bounds how much one token counts.
``ratio_low = 0`` means no lower clip.

Metric over the rl tokens: ``is_clipped`` (fraction whose ratio was clipped).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from prl_loss_common import RatioBandConfig, log_band, masked_fraction, rl_tokens, zero_where
from pydantic import Field

from prl.contracts.loss import Loss, LossInputs, LossOutputs
from prl.lazy import lazy_import

torch = lazy_import("torch")  # registry loads must stay torch-free


class CISPOLoss(Loss):
    """Policy gradient on log p with a detached, clipped importance weight."""

    type: ClassVar[str] = "cispo"

    class Config(RatioBandConfig):
        """``[trainer.loss] type = "cispo"``."""

        type: Literal["cispo"] = "cispo"
        """Selects this loss."""
        ratio_low: Annotated[float, Field(ge=0)] = 0.0
        """Lower clip of the importance weight (0: no lower clip)."""
        ratio_high: Annotated[float, Field(gt=0)] = 5.0
        """Upper clip of the importance weight."""
        adv_tau: float = 1.0
        """Multiplier on the advantage."""

    config: Config

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        cfg = self.config
        logp = inputs.trainer_logprobs
        active, weights, log_r = rl_tokens(inputs)
        with torch.no_grad():
            log_r = log_r.detach()
            low, high = log_band(cfg.ratio_low, cfg.ratio_high)
            coef = log_r.clamp(min=low, max=high).exp()
            clipped = (log_r > high) | (log_r < low)
        advantage = cfg.adv_tau * inputs.advantages.detach()
        per_token = zero_where(active, -weights * coef * advantage * zero_where(active, logp))
        return LossOutputs(loss=per_token, metrics={"is_clipped": masked_fraction(clipped, active)})
