"""IcePop: policy gradient with a fixed acceptance band on the importance ratio.

Per rl token (``docs/algorithms.md``), with ℓ = log p − log q and r = e^ℓ:

    loss_t = −w · 1[ratio_low ≤ sg(r) ≤ ratio_high] · adv_tau · A · r

The band test uses the detached ratio, so tokens outside it contribute neither value nor
gradient; inside it ∇loss_t = −w · adv_tau · A · r · ∇log p (r itself, uncapped: the band
already bounds it by ``ratio_high``). ``ratio_low = 0`` removes the lower edge.

Metrics over the rl tokens: ``is_masked`` (fraction outside the band),
``masked_mismatch_kl`` / ``unmasked_mismatch_kl`` (mean e^ℓ − 1 − ℓ outside / inside it).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from prl_loss_common import RatioBandConfig, log_band, mismatch_metrics, rl_tokens, zero_where
from pydantic import Field

from prl.contracts.loss import Loss, LossInputs, LossOutputs
from prl.lazy import lazy_import

torch = lazy_import("torch")  # registry loads must stay torch-free


class IcePopLoss(Loss):
    """Importance-weighted policy gradient that drops tokens whose ratio leaves a band."""

    type: ClassVar[str] = "icepop"

    class Config(RatioBandConfig):
        """``[trainer.loss] type = "icepop"``."""

        type: Literal["icepop"] = "icepop"
        """Selects this loss."""
        ratio_low: Annotated[float, Field(ge=0)] = 0.2
        """Lower edge of the accepted importance ratio p/q (0: no lower edge)."""
        ratio_high: Annotated[float, Field(gt=0)] = 5.0
        """Upper edge of the accepted importance ratio p/q."""
        adv_tau: float = 1.0
        """Multiplier on the advantage."""

    config: Config

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        cfg = self.config
        active, weights, log_r = rl_tokens(inputs)
        with torch.no_grad():
            low, high = log_band(cfg.ratio_low, cfg.ratio_high)
            outside = (log_r < low) | (log_r > high)
            dropped = active & outside
            keep = active & ~outside
        ratio = torch.exp(zero_where(keep, log_r))
        advantage = cfg.adv_tau * inputs.advantages.detach()
        per_token = zero_where(keep, -weights * advantage * ratio)
        return LossOutputs(loss=per_token, metrics=mismatch_metrics(log_r, dropped, keep, active))
