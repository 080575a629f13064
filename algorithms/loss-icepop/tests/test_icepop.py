"""IcePop against hand-computed values: the ratio band, weights, gradients, validation."""

import math

import pytest
import torch
from prl_loss_icepop.loss import IcePopLoss
from pydantic import ValidationError

from prl.contracts.loss import LossInputs
from prl.plugins import get_registry


def _inputs(ratios, advantages, weights=None, mask=None):
    q = torch.full((len(ratios),), 0.2, dtype=torch.float64)
    logp = (q * torch.tensor(ratios, dtype=torch.float64)).log().requires_grad_()
    return LossInputs(
        trainer_logprobs=logp,
        inference_logprobs=q.log(),
        advantages=torch.tensor(advantages, dtype=torch.float64),
        loss_mask=torch.tensor(mask or [True] * len(ratios)),
        rl_weights=None if weights is None else torch.tensor(weights, dtype=torch.float64),
    )


def _loss(**cfg):
    return IcePopLoss(IcePopLoss.Config(**cfg))


def test_registered_with_spec_defaults():
    cfg = get_registry().get("losses", "icepop").Config()
    assert (cfg.ratio_low, cfg.ratio_high, cfg.adv_tau) == (0.2, 5.0, 1.0)


def test_band_drops_tokens_and_gradient_is_r():
    inputs = _inputs([1.5, 3.0, 0.25, 1.0], [1.0, 1.0, 1.0, -1.0])
    out = _loss(ratio_low=0.5, ratio_high=2.0)(inputs)
    assert out.loss.tolist() == pytest.approx([-1.5, 0.0, 0.0, 1.0])
    out.loss.sum().backward()
    assert inputs.trainer_logprobs.grad.tolist() == pytest.approx([-1.5, 0.0, 0.0, 1.0])
    assert float(out.metrics["is_masked"]) == pytest.approx(0.5)
    masked = ((3 - 1 - math.log(3)) + (0.25 - 1 - math.log(0.25))) / 2
    assert float(out.metrics["masked_mismatch_kl"]) == pytest.approx(masked)
    assert float(out.metrics["unmasked_mismatch_kl"]) == pytest.approx((0.5 - math.log(1.5)) / 2)


def test_band_edges_are_inclusive():
    out = _loss(ratio_low=0.5, ratio_high=2.0)(_inputs([0.5, 2.0], [1.0, 1.0]))
    assert out.loss.tolist() == pytest.approx([-0.5, -2.0])


def test_weights_adv_tau_and_loss_mask():
    inputs = _inputs([1.5, 1.0, 1.0], [2.0, 2.0, 2.0], weights=[0.5, 0.0, 1.0], mask=[True, True, False])
    out = _loss(adv_tau=2.0)(inputs)
    assert out.loss.tolist() == pytest.approx([-0.5 * 2 * 2 * 1.5, 0.0, 0.0])
    assert float(out.metrics["is_masked"]) == 0.0


def test_low_above_high_is_rejected_naming_the_fields():
    with pytest.raises(ValidationError, match="ratio_low"):
        IcePopLoss.Config(ratio_low=3.0, ratio_high=2.0)
    with pytest.raises(ValidationError, match="ratio_low"):
        IcePopLoss.Config(ratio_low=-0.1)


def test_band_edges_are_inclusive_to_the_last_bit():
    # p/q = 2 and .5 with p, q powers of two: the log-ratio is exactly log 2 and log .5
    logp = torch.tensor([0.5, 0.25], dtype=torch.float64).log().requires_grad_()
    inputs = LossInputs(
        trainer_logprobs=logp,
        inference_logprobs=torch.tensor([0.25, 0.5], dtype=torch.float64).log(),
        advantages=torch.tensor([1.0, 1.0], dtype=torch.float64),
        loss_mask=torch.tensor([True, True]),
        rl_weights=None,
    )
    assert (logp - inputs.inference_logprobs).tolist() == [math.log(2.0), math.log(0.5)]
    out = _loss(ratio_low=0.5, ratio_high=2.0)(inputs)
    assert out.loss.tolist() == pytest.approx([-2.0, -0.5])
    assert float(out.metrics["is_masked"]) == 0.0


def test_a_token_far_outside_the_band_gives_a_finite_gradient():
    # r = e^1000 overflows; the dropped token must still give gradient 0, not NaN
    logp = torch.tensor([math.log(0.5), math.log(0.5)], dtype=torch.float64).requires_grad_()
    inputs = LossInputs(
        trainer_logprobs=logp,
        inference_logprobs=torch.tensor([math.log(0.5), -1000.0], dtype=torch.float64),
        advantages=torch.tensor([1.0, 1.0], dtype=torch.float64),
        loss_mask=torch.tensor([True, True]),
        rl_weights=None,
    )
    out = _loss()(inputs)
    out.loss.sum().backward()
    assert out.loss.tolist() == pytest.approx([-1.0, 0.0])
    assert logp.grad.tolist() == pytest.approx([-1.0, 0.0])
