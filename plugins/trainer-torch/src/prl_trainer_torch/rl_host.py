"""What the RL step must know about a micro-batch before its forward pass, found on the host.

The step's loss denominators (``prl_loss_common.local_scales``), which loss components a
micro-batch has tokens for (``components_present``), which of its packed samples have rl
tokens (a per-sample custom loss skips the others) and which positions carry a sampling
mask (sampling replay recomputes logits only there) all follow from the batch's lists, not
from the model. Asked of the device tensors, every answer is a read that makes the host wait
for the GPU, several per micro-batch; here they come from the numpy arrays the micro-batch's
tensors are copied from, holding the same float32 values the device gets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from prl_loss_common import Scales


@dataclass
class HostFacts:
    """One micro-batch's figures the step decides on before any forward pass."""

    scales: Scales  # this micro-batch's share of the step's loss denominators
    present: tuple[bool, bool, bool]  # it has rl, ce, ref_kl tokens
    rl_samples: list[bool]  # per packed sample (``seq_lens``): it has rl tokens


def host_facts(loss_mask: np.ndarray, weights: dict[str, np.ndarray], seq_lens: list[int]) -> HostFacts:
    """The :class:`HostFacts` of a micro-batch from its loss mask (bool, document starts
    already removed) and its float32 ``rl_weights``, ``ce_weights`` and ``ref_kl_weights``
    (already 0 at document starts), the arrays its device tensors are made from.

    The rl denominator is summed in float64 (the device summed in float32 before reading it
    as a float64): the same value for unit or binary-fraction weights, and closer to the
    exact sum of the float32 weights for any others."""
    rl = loss_mask & (weights["rl_weights"] != 0)
    ce = weights["ce_weights"] != 0
    ref_kl = weights["ref_kl_weights"] != 0
    rl_scale = float(weights["rl_weights"][rl].sum(dtype=np.float64))
    scales = Scales(rl_scale, float(np.count_nonzero(ce)), float(np.count_nonzero(ref_kl)))
    present = (bool(rl.any()), bool(ce.any()), bool(ref_kl.any()))
    bounds = np.cumsum([0, *seq_lens])
    rl_samples = [bool(rl[a:b].any()) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return HostFacts(scales, present, rl_samples)


def replay_rows(valid: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The positions whose prediction has a sampling mask, ascending, on ``device``, from the
    host's ``valid`` ([T, K], aligned with the tokens). Position i − 1 predicts token i, and
    position T − 1 gets token 0's mask (``forward_tokens`` rolls the masks by one)."""
    tokens = np.flatnonzero(valid.numpy().any(-1))
    return torch.from_numpy(np.sort((tokens - 1) % valid.shape[0])).to(device)
