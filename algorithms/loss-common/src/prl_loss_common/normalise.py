"""Combining the three loss components with global scales (``docs/algorithms.md``).

    loss = Σ rl / rl_scale + Σ ce / ce_scale + Σ ref_kl / ref_kl_scale

* ``rl_scale`` is the sum of rl weights over the rl tokens (``loss_mask`` and rl weight ≠ 0)
  of the whole step, on every rank; with unit weights it is the rl token count.
* ``ce_scale`` and ``ref_kl_scale`` count the tokens whose ce / ref_kl weight is ≠ 0.
* A token with weight 0 is dropped from that component's mask and from its denominator,
  so components never dilute each other.

Scales are summed over every micro-batch of the step first (``local_scales`` per
micro-batch, added), then over ranks (``global_scales``), and only then is any micro-batch
normalised; so gradient accumulation over micro-batches and ranks gives exactly the
gradient of the one global loss above. A component with no tokens anywhere has scale 0
and contributes 0.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prl.contracts.loss import Loss, LossInputs
from prl.lazy import lazy_import
from prl_loss_common.components import ce_loss, ref_kl_loss
from prl_loss_common.ratios import rl_mask

if TYPE_CHECKING:
    from torch import Tensor
torch = lazy_import("torch")  # registry loads must stay torch-free


@dataclass
class Scales:
    """Denominators of the three components (local until passed to ``global_scales``)."""

    rl: float = 0.0
    ce: float = 0.0
    ref_kl: float = 0.0

    def __add__(self, other: Scales) -> Scales:
        return Scales(self.rl + other.rl, self.ce + other.ce, self.ref_kl + other.ref_kl)

    def __radd__(self, other: object) -> Scales:
        # sum() starts from 0
        if other == 0:
            return self
        return NotImplemented


def local_scales(
    loss_mask: Tensor,
    rl_weights: Tensor | None = None,
    ce_weights: Tensor | None = None,
    ref_kl_weights: Tensor | None = None,
) -> Scales:
    """This micro-batch's contribution to the three denominators."""
    mask = rl_mask(loss_mask, rl_weights)
    rl = mask.float().sum() if rl_weights is None else torch.where(mask, rl_weights.float(), 0.0).sum()
    zero = rl.new_zeros(())
    ce = (ce_weights != 0).sum().float() if ce_weights is not None else zero
    ref_kl = (ref_kl_weights != 0).sum().float() if ref_kl_weights is not None else zero
    # one host read for the three (each float() would wait for the device on its own)
    values = torch.stack([rl.double(), ce.double(), ref_kl.double()]).tolist()
    return Scales(values[0], values[1], values[2])


def global_scales(scales: Scales, group: object | None = None) -> Scales:
    """Sum ``scales`` over the ranks of ``group`` (no-op without torch.distributed)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return scales
    buf = torch.tensor([scales.rl, scales.ce, scales.ref_kl], dtype=torch.float64)
    if dist.get_backend(group) == "nccl":
        buf = buf.cuda()
    dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group)
    rl, ce, ref_kl = buf.tolist()
    return Scales(rl, ce, ref_kl)


@dataclass
class ComponentSums:
    """Un-normalised sums of the three components for one micro-batch, and their metrics."""

    rl: Tensor
    ce: Tensor
    ref_kl: Tensor
    metrics: dict[str, Tensor] = field(default_factory=dict)


def component_losses(
    loss: Loss,
    inputs: LossInputs,
    ce_weights: Tensor | None = None,
    ref_kl_weights: Tensor | None = None,
    present: tuple[bool, bool, bool] | None = None,
) -> ComponentSums:
    """Run the rl loss and the fixed ce / ref_kl components on one micro-batch.

    ``present`` (rl, ce, ref_kl: does the micro-batch have tokens for it, from
    :func:`components_present`) lets a caller decide before the forward pass; without it
    the tensors are asked here, which makes the host wait for the forward pass.

    The rl loss sees ``loss_mask`` already narrowed to its tokens (rl weight ≠ 0), so a
    custom loss need not re-derive it; it may return per-token losses or their sum. A
    component without tokens contributes an exact 0 that still belongs to the graph, so
    every rank can run backward.
    """
    anchor = inputs.trainer_logprobs.sum() * 0.0
    metrics: dict[str, Tensor] = {}
    rl = ce = ref_kl = anchor
    active = rl_mask(inputs.loss_mask, inputs.rl_weights)
    if present is None:
        present = components_present(inputs.loss_mask, inputs.rl_weights, ce_weights, ref_kl_weights)
    has_rl, has_ce, has_ref_kl = present
    if has_rl:
        # a shallow copy keeps any extra per-token inputs (e.g. score centering's
        # sampling-mask logprobs), which dataclasses.replace would drop
        narrowed = copy.copy(inputs)
        narrowed.loss_mask = active
        out = loss(narrowed)
        rl = anchor + out.loss.sum()
        metrics.update(out.metrics)
    if has_ce:
        out = ce_loss(inputs.trainer_logprobs, ce_weights)
        ce = anchor + out.loss.sum()
        metrics.update(out.metrics)
    if has_ref_kl:
        out = ref_kl_loss(inputs.trainer_logprobs, inputs.inference_logprobs, inputs.ref_logprobs, ref_kl_weights)
        ref_kl = anchor + out.loss.sum()
        metrics.update(out.metrics)
    return ComponentSums(rl, ce, ref_kl, metrics)


def components_present(
    loss_mask: Tensor,
    rl_weights: Tensor | None = None,
    ce_weights: Tensor | None = None,
    ref_kl_weights: Tensor | None = None,
) -> tuple[bool, bool, bool]:
    """Whether a micro-batch has rl, ce and ref_kl tokens (one host read for the three)."""
    none = loss_mask.new_zeros((), dtype=torch.bool)
    ce = (ce_weights != 0).any() if ce_weights is not None else none
    ref_kl = (ref_kl_weights != 0).any() if ref_kl_weights is not None else none
    flags = torch.stack([rl_mask(loss_mask, rl_weights).any(), ce, ref_kl]).tolist()
    return flags[0], flags[1], flags[2]


def normalise(sums: ComponentSums, scales: Scales) -> Tensor:
    """Σrl/rl_scale + Σce/ce_scale + Σref_kl/ref_kl_scale (a zero scale counts as 1: its sum is 0)."""

    def scaled(total: Tensor, scale: float) -> Tensor:
        return total / scale if scale > 0 else total

    return scaled(sums.rl, scales.rl) + scaled(sums.ce, scales.ce) + scaled(sums.ref_kl, scales.ref_kl)
