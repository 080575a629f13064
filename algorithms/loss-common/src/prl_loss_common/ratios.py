"""Importance ratios, mismatch KL and masking helpers shared by every loss.

Notation (``docs/algorithms.md``): p = exp(trainer logprob), q = exp(inference logprob),
ℓ = log p − log q, r = e^ℓ. Gradients flow only through the trainer logprobs; the
inference logprobs are constants.

Capped ratio. ``capped_ratio(ℓ, M)`` returns r̂ = exp(min(sg(ℓ), log M) + ℓ − sg(ℓ)). Its
value is min(r, M) and its gradient keeps the form of r's, ∂r̂/∂ℓ = r̂: below the cap it is
exactly r (value and gradient), above it the token still pushes with magnitude M. A plain
``clamp`` would instead zero the gradient of every capped token, and leaving r unbounded
would let one stale token produce an infinite gradient.

Mismatch KL. ``mismatch_kl(ℓ) = e^ℓ − 1 − ℓ`` (the k3 estimator of KL(q‖p) for samples of
q), ≥ 0 and 0 only when p = q. ``expm1`` keeps it accurate for small ℓ, and ℓ is clipped
at 60 so an extreme token gives a large finite number rather than inf.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from prl.lazy import lazy_import

torch = lazy_import("torch")  # registry loads must stay torch-free
if TYPE_CHECKING:
    from torch import Tensor

_METRIC_LOG_LIMIT = 60.0


def log_ratio(trainer_logprobs: Tensor, inference_logprobs: Tensor) -> Tensor:
    """ℓ = log p − log q, differentiable in the trainer logprobs only."""
    return trainer_logprobs - inference_logprobs.detach()


def capped_ratio(log_r: Tensor, max_ratio: float) -> Tensor:
    """r with its value capped at ``max_ratio`` and gradient ∂r̂/∂ℓ = r̂ (see module doc)."""
    detached = log_r.detach()
    capped = detached.clamp(max=math.log(max_ratio))
    return torch.exp(capped + (log_r - detached))


def mismatch_kl(log_r: Tensor) -> Tensor:
    """Per-token e^ℓ − 1 − ℓ (no gradient; a metric)."""
    with torch.no_grad():
        clipped = log_r.detach().clamp(max=_METRIC_LOG_LIMIT)
        return torch.expm1(clipped) - clipped


def abs_prob_diff(trainer_logprobs: Tensor, inference_logprobs: Tensor) -> Tensor:
    """|p − q| computed as e^max · (1 − e^(min − max)) so tiny differences do not cancel."""
    with torch.no_grad():
        hi = torch.maximum(trainer_logprobs.detach(), inference_logprobs.detach())
        lo = torch.minimum(trainer_logprobs.detach(), inference_logprobs.detach())
        return torch.exp(hi) * -torch.expm1(lo - hi)


def rl_mask(loss_mask: Tensor, rl_weights: Tensor | None) -> Tensor:
    """Tokens the rl loss acts on: in ``loss_mask`` and with a nonzero rl weight."""
    mask = loss_mask.bool()
    if rl_weights is not None:
        mask = mask & (rl_weights != 0)
    return mask


def weights_or_ones(weights: Tensor | None, like: Tensor) -> Tensor:
    """The weight stream, or 1 everywhere when the stream is absent."""
    if weights is None:
        return torch.ones_like(like, dtype=like.dtype if like.is_floating_point() else torch.float32)
    return weights.to(like.dtype) if like.is_floating_point() else weights.float()


def zero_where(keep: Tensor, values: Tensor) -> Tensor:
    """``values`` where ``keep`` is true, else 0 (gradient 0 there too)."""
    return torch.where(keep, values, torch.zeros_like(values))


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over ``mask`` as a 0-d tensor; 0 when the mask is empty."""
    mask = mask.bool()
    values = values if values.is_floating_point() else values.float()
    return zero_where(mask, values).sum() / mask.sum().clamp_min(1).to(values.dtype)


def masked_fraction(flags: Tensor, mask: Tensor) -> Tensor:
    """Fraction of ``mask`` tokens whose flag is set (0 when the mask is empty)."""
    return masked_mean(flags.float(), mask)


def rl_tokens(inputs: Any) -> tuple[Tensor, Tensor, Tensor]:
    """The common start of every policy loss, from its ``LossInputs``: the rl tokens, their
    weights (1 where the stream is absent) and ℓ, zeroed off the rl tokens so padding
    (logprob −inf) cannot turn into NaN gradients."""
    logp = inputs.trainer_logprobs
    active = rl_mask(inputs.loss_mask, inputs.rl_weights)
    weights = weights_or_ones(inputs.rl_weights, logp)
    return active, weights, zero_where(active, log_ratio(logp, inputs.inference_logprobs))


def log_band(ratio_low: float, ratio_high: float) -> tuple[float, float]:
    """(log ratio_low, log ratio_high) of a ratio band; ``ratio_low = 0`` is no lower edge."""
    return (math.log(ratio_low) if ratio_low > 0 else -math.inf), math.log(ratio_high)


def mismatch_metrics(log_r: Tensor, dropped: Tensor, keep: Tensor, active: Tensor) -> dict[str, Tensor]:
    """``is_masked`` (fraction of rl tokens dropped) and the mean mismatch KL over the
    dropped and the kept tokens, for losses that drop tokens from a trust region."""
    kl = mismatch_kl(log_r)
    return {
        "is_masked": masked_fraction(dropped, active),
        "masked_mismatch_kl": masked_mean(kl, dropped),
        "unmasked_mismatch_kl": masked_mean(kl, keep),
    }
