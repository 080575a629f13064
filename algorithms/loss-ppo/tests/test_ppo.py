"""PPO against hand-computed values: both clip branches, the cap, gradients, validation."""

import math

import pytest
import torch
from prl_loss_ppo.loss import PPOLoss
from pydantic import ValidationError

from prl.contracts.loss import LossInputs
from prl.plugins import get_registry


def _inputs(ratios, advantages, weights=None):
    q = torch.full((len(ratios),), 0.25, dtype=torch.float64)
    logp = (q * torch.tensor(ratios, dtype=torch.float64)).log().requires_grad_()
    return LossInputs(
        trainer_logprobs=logp,
        inference_logprobs=q.log(),
        advantages=torch.tensor(advantages, dtype=torch.float64),
        loss_mask=torch.ones(len(ratios), dtype=torch.bool),
        rl_weights=None if weights is None else torch.tensor(weights, dtype=torch.float64),
    )


def _loss(**cfg):
    return PPOLoss(PPOLoss.Config(**cfg))


def test_registered_with_spec_defaults():
    cfg = get_registry().get("losses", "ppo").Config()
    assert (cfg.ratio_low, cfg.ratio_high, cfg.max_importance_ratio, cfg.adv_tau) == (0.8, 1.2, 1e4, 1.0)


def test_clipped_surrogate_by_hand():
    # r 1.5 A+ (clipped: -1.2), r 1.5 A- (unclipped: -min(-1.5,-1.2) = 1.5),
    # r .5 A- (clipped: -min(-.5,-.8) = .8), r 1 A 2 (-2)
    inputs = _inputs([1.5, 1.5, 0.5, 1.0], [1.0, -1.0, -1.0, 2.0], weights=[1.0, 1.0, 1.0, 0.5])
    out = _loss()(inputs)
    assert out.loss.tolist() == pytest.approx([-1.2, 1.5, 0.8, -1.0])
    out.loss.sum().backward()
    # clipped tokens get no gradient; others -w A' r
    assert inputs.trainer_logprobs.grad.tolist() == pytest.approx([0.0, 1.5, 0.0, -1.0])
    assert float(out.metrics["is_clipped"]) == pytest.approx(0.5)
    assert float(out.metrics["ratio_capped"]) == 0.0


def test_cap_and_adv_tau():
    inputs = _inputs([2.0, 1.0], [-1.0, 1.0])
    out = _loss(max_importance_ratio=1.5, adv_tau=3.0)(inputs)
    # token 0: r^ = 1.5, A' = -3: -min(-4.5, -3.6) = 4.5; token 1: -3
    assert out.loss.tolist() == pytest.approx([4.5, -3.0])
    out.loss.sum().backward()
    assert inputs.trainer_logprobs.grad.tolist() == pytest.approx([4.5, -3.0])
    assert float(out.metrics["ratio_capped"]) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"ratio_low": 0.0}, "ratio_low"),
        ({"ratio_low": 1.1}, "ratio_low"),
        ({"ratio_high": 0.9}, "ratio_high"),
        ({"ratio_high": 2.0, "max_importance_ratio": 1.5}, "max_importance_ratio"),
    ],
)
def test_invalid_bounds_name_the_field(fields, name):
    with pytest.raises(ValidationError, match=name):
        PPOLoss.Config(**fields)


def test_boundary_values_are_valid():
    cfg = PPOLoss.Config(ratio_low=1.0, ratio_high=1.0, max_importance_ratio=1.0)
    assert cfg.ratio_low == cfg.ratio_high == 1.0


def _pq(p, q, advantages):
    """Tokens of trainer probability p and inference probability q."""
    return LossInputs(
        trainer_logprobs=torch.tensor(p, dtype=torch.float64).log().requires_grad_(),
        inference_logprobs=torch.tensor(q, dtype=torch.float64).log(),
        advantages=torch.tensor(advantages, dtype=torch.float64),
        loss_mask=torch.ones(len(p), dtype=torch.bool),
        rl_weights=None,
    )


def test_ratio_exactly_on_a_clip_edge_is_not_clipped():
    # r = 2 = ratio_high with A > 0, and r = .5 = ratio_low with A < 0: both on the edge
    inputs = _pq([0.5, 0.25], [0.25, 0.5], [1.0, -1.0])
    # the log-ratio is exactly the edge the code compares with, log 2 and log .5
    assert (inputs.trainer_logprobs - inputs.inference_logprobs).tolist() == [math.log(2.0), math.log(0.5)]
    out = _loss(ratio_low=0.5, ratio_high=2.0, max_importance_ratio=2.0)(inputs)
    assert out.loss.tolist() == pytest.approx([-2.0, 0.5])
    assert float(out.metrics["is_clipped"]) == 0.0
    # r = max_importance_ratio exactly is not over the cap
    assert float(out.metrics["ratio_capped"]) == 0.0


def test_is_clipped_needs_a_nonzero_advantage_of_the_right_sign():
    # r 4 and r .25 (both far outside [.5, 2]) with advantages 0, 0, .5 and -.5
    inputs = _pq([0.5, 0.125, 0.5, 0.125], [0.125, 0.5, 0.125, 0.5], [0.0, 0.0, 0.5, -0.5])
    out = _loss(ratio_low=0.5, ratio_high=2.0)(inputs)
    # A = 0 tokens lose nothing, so they are not on a clipped branch; A = ±.5 tokens are
    assert float(out.metrics["is_clipped"]) == pytest.approx(0.5)
    assert out.loss.tolist() == pytest.approx([0.0, 0.0, -1.0, 0.25])


def test_cap_below_ratio_high_message():
    with pytest.raises(
        ValidationError, match=r"Value error, max_importance_ratio \(1\.5\) must be >= ratio_high \(2\.0\) \["
    ):
        PPOLoss.Config(ratio_high=2.0, max_importance_ratio=1.5)
