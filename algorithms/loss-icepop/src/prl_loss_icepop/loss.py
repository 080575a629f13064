"""IcePop: policy gradient with a fixed acceptance band on the importance ratio.

Per rl token (spec ``rl-loop.md`` §6), with ℓ = log p − log q and r = e^ℓ:

    loss_t = −w · 1[ratio_low ≤ sg(r) ≤ ratio_high] · adv_tau · A · r

The band test uses the detached ratio, so tokens outside it contribute neither value nor
gradient; inside it ∇loss_t = −w · adv_tau · A · r · ∇log p (r itself, uncapped: the band
already bounds it by ``ratio_high``). ``ratio_low = 0`` removes the lower edge.

Metrics over the rl tokens: ``is_masked`` (fraction outside the band),
``masked_mismatch_kl`` / ``unmasked_mismatch_kl`` (mean e^ℓ − 1 − ℓ outside / inside it).
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

from prl.lazy import lazy_import

torch = lazy_import("torch")  # registry loads must stay torch-free
from prl.contracts.loss import Loss, LossConfig, LossInputs, LossOutputs
from prl_loss_common import (
    log_ratio,
    masked_fraction,
    masked_mean,
    mismatch_kl,
    rl_mask,
    weights_or_ones,
    zero_where,
)
from pydantic import Field, model_validator


class IcePopLoss(Loss):
    """Importance-weighted policy gradient that drops tokens whose ratio leaves a band."""

    type: ClassVar[str] = "icepop"

    class Config(LossConfig):
        """``[trainer.loss] type = "icepop"``."""

        type: Literal["icepop"] = "icepop"
        """Selects this loss."""
        ratio_low: Annotated[float, Field(ge=0)] = 0.2
        """Lower edge of the accepted importance ratio p/q (0: no lower edge)."""
        ratio_high: Annotated[float, Field(gt=0)] = 5.0
        """Upper edge of the accepted importance ratio p/q."""
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
        log_r = zero_where(active, log_ratio(logp, inputs.inference_logprobs))
        with torch.no_grad():
            low = math.log(cfg.ratio_low) if cfg.ratio_low > 0 else -math.inf
            outside = (log_r < low) | (log_r > math.log(cfg.ratio_high))
            dropped = active & outside
            keep = active & ~outside
        ratio = torch.exp(zero_where(keep, log_r))
        advantage = cfg.adv_tau * inputs.advantages.detach()
        per_token = zero_where(keep, -weights * advantage * ratio)
        kl = mismatch_kl(log_r)
        metrics = {
            "is_masked": masked_fraction(dropped, active),
            "masked_mismatch_kl": masked_mean(kl, dropped),
            "unmasked_mismatch_kl": masked_mean(kl, keep),
        }
        return LossOutputs(loss=per_token, metrics=metrics)
