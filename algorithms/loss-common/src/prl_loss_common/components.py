"""The fixed loss components, not configurable (``docs/algorithms.md``).

ce (sft, echo's env tokens): per-token loss −w · log p on tokens with ce weight ≠ 0.
Metric ``nll``: the unweighted mean of −log p over those tokens.

ref_kl (opd, opsd): a policy-gradient step on the reverse KL to a reference π_ref,
per-token loss −w · sg(log π_ref − log p) · r̂ with r̂ the importance ratio capped at 1e4.
Since ∇(−sg(log π_ref − log p) · r) = r · (log p − log π_ref) · ∇log p, the update lowers
log p where the policy is above the reference and raises it where it is below; r corrects
for the tokens having been sampled by the inference engine. A one-sided trust region drops
tokens whose trainer probability fell more than 0.2 below the inference probability
(p − q < −0.2). Metrics: ``ref_kl`` (mean of log p − log π_ref, the k1 estimate of
KL(π‖π_ref), over the tokens the component covers), ``ref_kl/is_masked`` (fraction dropped)
and ``ref_kl/{masked,unmasked}_mismatch_kl`` (mean e^ℓ − 1 − ℓ over the dropped / kept
tokens). The metrics are namespaced because rl losses report same-named metrics with a
different trust region.

Both return a full-length per-token loss, 0 outside their tokens, already multiplied by the
weight and not normalised.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prl.contracts.loss import LossOutputs
from prl.lazy import lazy_import
from prl_loss_common.ratios import (
    capped_ratio,
    log_ratio,
    masked_fraction,
    masked_mean,
    mismatch_kl,
    zero_where,
)

if TYPE_CHECKING:
    from torch import Tensor
torch = lazy_import("torch")  # registry loads must stay torch-free

REF_KL_MAX_RATIO = 1e4
REF_KL_PROB_DROP = 0.2


def ce_loss(trainer_logprobs: Tensor, ce_weights: Tensor) -> LossOutputs:
    """−w · log p on tokens with w ≠ 0; metric ``nll``."""
    active = ce_weights != 0
    weights = ce_weights.to(trainer_logprobs.dtype)
    per_token = zero_where(active, -weights * trainer_logprobs)
    with torch.no_grad():
        nll = masked_mean(-trainer_logprobs.detach(), active)
    return LossOutputs(loss=per_token, metrics={"nll": nll})


def ref_kl_loss(
    trainer_logprobs: Tensor,
    inference_logprobs: Tensor,
    ref_logprobs: Tensor | None,
    ref_kl_weights: Tensor,
) -> LossOutputs:
    """−w · sg(log π_ref − log p) · r̂ on tokens with w ≠ 0 and p − q ≥ −0.2."""
    active = ref_kl_weights != 0
    if ref_logprobs is None:
        if bool(active.any()):
            raise ValueError(
                "ref_kl_weights are set but ref_logprobs is missing; use an algorithm that provides them (opd, opsd)"
            )
        ref_logprobs = trainer_logprobs.detach()
    log_r = log_ratio(trainer_logprobs, inference_logprobs)
    with torch.no_grad():
        prob_delta = trainer_logprobs.detach().exp() - inference_logprobs.detach().exp()
        dropped = active & (prob_delta < -REF_KL_PROB_DROP)
        keep = active & ~dropped
    safe_log_r = zero_where(keep, log_r)
    advantage = (ref_logprobs - trainer_logprobs).detach()
    weights = ref_kl_weights.to(trainer_logprobs.dtype)
    per_token = zero_where(keep, -weights * advantage * capped_ratio(safe_log_r, REF_KL_MAX_RATIO))
    with torch.no_grad():
        kl = mismatch_kl(log_r)
        metrics = {
            "ref_kl": masked_mean(-advantage, active),
            "ref_kl/is_masked": masked_fraction(dropped, active),
            "ref_kl/masked_mismatch_kl": masked_mean(kl, dropped),
            "ref_kl/unmasked_mismatch_kl": masked_mean(kl, keep),
        }
    return LossOutputs(loss=per_token, metrics=metrics)
