"""CISPO against hand-computed values: detached clipped weight, gradient through log p."""

import math

import pytest
import torch
from prl_loss_cispo.loss import CISPOLoss
from pydantic import ValidationError

from prl.contracts.loss import LossInputs
from prl.plugins import get_registry


def _inputs():
    # token 0: p .6 q .2 (r 3), token 1: p .1 q .2 (r .5), token 2 outside the mask
    return LossInputs(
        trainer_logprobs=torch.tensor([0.6, 0.1, 0.3], dtype=torch.float64).log().requires_grad_(),
        inference_logprobs=torch.tensor([0.2, 0.2, 0.9], dtype=torch.float64).log(),
        advantages=torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64),
        loss_mask=torch.tensor([True, True, False]),
        rl_weights=None,
    )


def _loss(**cfg):
    return CISPOLoss(CISPOLoss.Config(**cfg))


def test_registered_with_spec_defaults():
    cfg = get_registry().get("losses", "cispo").Config()
    assert (cfg.ratio_low, cfg.ratio_high, cfg.adv_tau) == (0.0, 5.0, 1.0)


def test_weight_is_clipped_and_detached():
    inputs = _inputs()
    out = _loss(ratio_high=2.0)(inputs)
    # -sg(clip r) A log p: token 0 weight 2 (clipped from 3), token 1 weight .5
    assert out.loss.tolist() == pytest.approx([-2 * math.log(0.6), 0.5 * 2 * math.log(0.1), 0.0])
    out.loss.sum().backward()
    # gradient -clip(r) A, the ratio contributes none
    assert inputs.trainer_logprobs.grad.tolist() == pytest.approx([-2.0, 1.0, 0.0])
    assert float(out.metrics["is_clipped"]) == pytest.approx(0.5)


def test_lower_clip_and_adv_tau():
    inputs = _inputs()
    out = _loss(ratio_low=0.8, ratio_high=2.0, adv_tau=0.5)(inputs)
    out.loss.sum().backward()
    assert inputs.trainer_logprobs.grad.tolist() == pytest.approx([-1.0, 0.8, 0.0])
    assert float(out.metrics["is_clipped"]) == pytest.approx(1.0)


def test_invalid_band_names_the_field():
    with pytest.raises(ValidationError, match="ratio_low"):
        CISPOLoss.Config(ratio_low=6.0)
    with pytest.raises(ValidationError, match="ratio_high"):
        CISPOLoss.Config(ratio_high=0.0)


def _pq(p, q, advantages, mask=None):
    return LossInputs(
        trainer_logprobs=torch.tensor(p, dtype=torch.float64).log().requires_grad_(),
        inference_logprobs=torch.tensor(q, dtype=torch.float64).log(),
        advantages=torch.tensor(advantages, dtype=torch.float64),
        loss_mask=torch.tensor(mask or [True] * len(p)),
        rl_weights=None,
    )


def test_ratio_exactly_on_a_clip_edge_is_not_counted_as_clipped():
    inputs = _pq([0.5, 0.25], [0.25, 0.5], [1.0, 1.0])
    # the log-ratio is exactly the edge the code compares with, log 2 and log .5
    assert (inputs.trainer_logprobs - inputs.inference_logprobs).tolist() == [math.log(2.0), math.log(0.5)]
    out = _loss(ratio_low=0.5, ratio_high=2.0)(inputs)
    out.loss.sum().backward()
    assert inputs.trainer_logprobs.grad.tolist() == pytest.approx([-2.0, -0.5])
    assert float(out.metrics["is_clipped"]) == 0.0


def test_padding_tokens_give_zero_loss_and_gradient():
    # token 1 is padding: logprob −inf on both sides, outside the loss mask
    inputs = _pq([0.5, 0.0], [0.5, 0.0], [1.0, 0.0], mask=[True, False])
    out = _loss()(inputs)
    out.loss.sum().backward()
    assert out.loss.tolist() == pytest.approx([-math.log(0.5), 0.0])
    assert inputs.trainer_logprobs.grad.tolist() == pytest.approx([-1.0, 0.0])
