"""PPO against hand-computed values: both clip branches, the cap, gradients, validation."""

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
