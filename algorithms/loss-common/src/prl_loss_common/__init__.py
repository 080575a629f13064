"""Shared torch pieces of prl's trainer loss (``docs/algorithms.md``).

The loss plugins build their per-token rl loss from :mod:`prl_loss_common.ratios`; the
trainer combines that rl loss with the fixed ce and ref_kl components of
:mod:`prl_loss_common.components` and normalises the sums with
:mod:`prl_loss_common.normalise`.
"""

from prl_loss_common.components import ce_loss, ref_kl_loss
from prl_loss_common.config import RatioBandConfig
from prl_loss_common.normalise import (
    ComponentSums,
    Scales,
    component_losses,
    components_present,
    global_scales,
    local_scales,
    normalise,
)
from prl_loss_common.ratios import (
    abs_prob_diff,
    capped_ratio,
    log_band,
    log_ratio,
    masked_fraction,
    masked_mean,
    mismatch_kl,
    mismatch_metrics,
    rl_mask,
    rl_tokens,
    weights_or_ones,
    zero_where,
)

__all__ = [
    "ComponentSums",
    "RatioBandConfig",
    "Scales",
    "abs_prob_diff",
    "capped_ratio",
    "ce_loss",
    "component_losses",
    "components_present",
    "global_scales",
    "local_scales",
    "log_band",
    "log_ratio",
    "masked_fraction",
    "masked_mean",
    "mismatch_kl",
    "mismatch_metrics",
    "normalise",
    "ref_kl_loss",
    "rl_mask",
    "rl_tokens",
    "weights_or_ones",
    "zero_where",
]
