"""IPO: policy gradient inside an absolute-probability trust region (the default loss).

Per rl token (``docs/algorithms.md``), with p, q the trainer and inference probabilities of
the sampled token, ℓ = log p − log q and r̂ the importance ratio capped at
``max_importance_ratio`` (value capped, gradient still flows; see
:func:`prl_loss_common.capped_ratio`):

    loss_t = −w · 1[|p − q| ≤ eps] · adv_tau · A · r̂

so ∇loss_t = −w · adv_tau · A · r̂ · ∇log p on kept tokens. The trust region is absolute in
probability space: a token is dropped when its probability moved by more than ``eps``
between the sampler and the trainer, whichever direction. Dropping (instead of clipping)
removes the token's gradient entirely, so a badly stale token cannot push the policy.

Score centering (``score_centering = true``) subtracts the sampler-expected weighted score
Σ_{v∈S} q(v) · c(v) · ∇log p(v) from each rl token's update, where S is the sampling mask
(the truncated top-p/top-k set), c(v) the capped ratio of v inside the trust region and 0
outside. In loss form it adds + w · adv_tau · A · Σ_v sg(q(v) · c(v)) · log p(v) on every rl
token, masked or not. This needs, per token, the trainer's and the sampler's logprob of every
id in S: ``LossInputs.trainer_mask_logprobs`` / ``inference_mask_logprobs`` of shape
[tokens, |S|], sampler padding −inf. Without them (untruncated sampling) it is an error.

Metrics over the rl tokens: ``is_masked`` (fraction dropped by the trust region),
``masked_mismatch_kl`` and ``unmasked_mismatch_kl`` (mean e^ℓ − 1 − ℓ over the dropped and
the kept tokens).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from prl_loss_common import abs_prob_diff, capped_ratio, mismatch_metrics, rl_tokens, zero_where
from pydantic import Field

from prl.contracts.loss import Loss, LossConfig, LossInputs, LossOutputs
from prl.lazy import lazy_import

if TYPE_CHECKING:
    from torch import Tensor
torch = lazy_import("torch")  # registry loads must stay torch-free


class IPOLoss(Loss):
    """Masked importance-weighted policy gradient with an absolute-probability trust region."""

    type: ClassVar[str] = "ipo"
    is_default: ClassVar[bool] = True

    class Config(LossConfig):
        """``[trainer.loss] type = "ipo"``."""

        type: Literal["ipo"] = "ipo"
        """Selects this loss."""
        eps: Annotated[float, Field(gt=0)] = 0.3
        """Trust region: tokens with |p − q| above this leave the loss."""
        max_importance_ratio: Annotated[float, Field(gt=0)] = 1e4
        """Cap on the value of the importance ratio p/q."""
        adv_tau: float = 1.0
        """Multiplier on the advantage."""
        score_centering: bool = False
        """Subtract the sampler-expected weighted score; requires truncated sampling (top_p < 1
        or top_k) from a backend that reports the sampling mask and its logprobs (torch).
        ``prl rl`` refuses it at config time otherwise."""

        def sampling_mask_field(self) -> str | None:
            """``score_centering`` when it is on: it reads the sampling-mask logprobs."""
            return "score_centering" if self.score_centering else None

    config: Config

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        cfg = self.config
        active, weights, log_r = rl_tokens(inputs)
        with torch.no_grad():
            dropped = active & (abs_prob_diff(inputs.trainer_logprobs, inputs.inference_logprobs) > cfg.eps)
            keep = active & ~dropped
        ratio = capped_ratio(zero_where(keep, log_r), cfg.max_importance_ratio)
        advantage = cfg.adv_tau * inputs.advantages.detach()
        per_token = zero_where(keep, -weights * advantage * ratio)
        if cfg.score_centering:
            per_token = per_token + zero_where(active, weights * advantage * self._expected_score(inputs))
        return LossOutputs(loss=per_token, metrics=mismatch_metrics(log_r, dropped, keep, active))

    def _expected_score(self, inputs: LossInputs) -> Tensor:
        """Per token Σ_v sg(q(v) · c(v)) · log p(v) over the sampling mask."""
        trainer = getattr(inputs, "trainer_mask_logprobs", None)
        sampler = getattr(inputs, "inference_mask_logprobs", None)
        if trainer is None or sampler is None:
            raise ValueError(
                "score_centering needs the sampling-mask logprobs (trainer_mask_logprobs, "
                "inference_mask_logprobs); enable truncated sampling (top_p < 1 or top_k) or "
                "set score_centering = false"
            )
        cfg = self.config
        valid = torch.isfinite(sampler)
        safe_trainer = torch.where(valid, trainer, torch.zeros_like(trainer))
        with torch.no_grad():
            safe_sampler = torch.where(valid, sampler, torch.zeros_like(sampler))
            q, p = safe_sampler.exp(), safe_trainer.detach().exp()
            ratio = (safe_trainer.detach() - safe_sampler).clamp(max=math.log(cfg.max_importance_ratio)).exp()
            inside = valid & ((p - q).abs() <= cfg.eps)
            coef = torch.where(inside, q * ratio, torch.zeros_like(q))
        return (coef * safe_trainer).sum(-1)
