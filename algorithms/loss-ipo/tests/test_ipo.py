"""IPO against hand-computed values: trust region, cap, weights, gradients, centering."""

import math

import pytest
import torch
from prl_loss_ipo.loss import IPOLoss
from pydantic import ValidationError

from prl.contracts.loss import LossInputs
from prl.plugins import get_registry


def _inputs(**over):
    # token 0: p .5 q .4 (kept, r 1.25); token 1: p = q = .4 (kept, r 1);
    # token 2: p .1 q .5 (|p-q| .4 > eps .3, dropped); token 3: outside the loss mask
    values = dict(
        trainer_logprobs=torch.tensor([0.5, 0.4, 0.1, 0.9], dtype=torch.float64).log().requires_grad_(),
        inference_logprobs=torch.tensor([0.4, 0.4, 0.5, 0.3], dtype=torch.float64).log(),
        advantages=torch.tensor([2.0, -1.0, 3.0, 5.0], dtype=torch.float64),
        loss_mask=torch.tensor([True, True, True, False]),
        rl_weights=torch.tensor([1.0, 0.5, 1.0, 1.0], dtype=torch.float64),
    )
    values.update(over)
    return LossInputs(**values)


def _loss(**cfg):
    return IPOLoss(IPOLoss.Config(**cfg))


def test_registered_as_ipo_with_spec_defaults():
    cls = get_registry().get("losses", "ipo")
    cfg = cls.Config()
    assert cls is IPOLoss
    assert (cfg.eps, cfg.max_importance_ratio, cfg.adv_tau, cfg.score_centering) == (0.3, 1e4, 1.0, False)


def test_per_token_loss_and_gradient_by_hand():
    inputs = _inputs()
    out = _loss()(inputs)
    # -w * A * r: token 0 = -1 * 2 * 1.25, token 1 = -0.5 * -1 * 1; 2 dropped; 3 masked out
    assert out.loss.tolist() == pytest.approx([-2.5, 0.5, 0.0, 0.0])
    out.loss.sum().backward()
    # d/dlog p of -w A r is -w A r (dr/dlog p = r)
    assert inputs.trainer_logprobs.grad.tolist() == pytest.approx([-2.5, 0.5, 0.0, 0.0])


def test_metrics_cover_rl_tokens_only():
    out = _loss()(_inputs())
    assert float(out.metrics["is_masked"]) == pytest.approx(1 / 3)
    assert float(out.metrics["masked_mismatch_kl"]) == pytest.approx(0.2 - 1 - math.log(0.2))
    kept = (0.25 - math.log(1.25) + 0.0) / 2
    assert float(out.metrics["unmasked_mismatch_kl"]) == pytest.approx(kept)


def test_zero_rl_weight_leaves_the_loss_and_metrics():
    inputs = _inputs(rl_weights=torch.tensor([1.0, 0.5, 0.0, 1.0], dtype=torch.float64))
    out = _loss()(inputs)
    assert float(out.metrics["is_masked"]) == 0.0
    assert float(out.metrics["masked_mismatch_kl"]) == 0.0


def test_cap_clamps_value_but_keeps_a_gradient():
    inputs = _inputs()
    out = _loss(max_importance_ratio=1.1)(inputs)
    assert out.loss[0].item() == pytest.approx(-2 * 1.1)
    out.loss.sum().backward()
    # a plain clamp would give 0 here; the capped ratio keeps dr^/dl = r^ = 1.1
    assert inputs.trainer_logprobs.grad[0].item() == pytest.approx(-2.2)


def test_eps_and_adv_tau():
    out = _loss(eps=0.5, adv_tau=0.5)(_inputs())
    # token 2 now inside the region: -1 * 0.5 * 3 * 0.2
    assert out.loss.tolist() == pytest.approx([-1.25, 0.25, -0.3, 0.0])
    assert float(out.metrics["is_masked"]) == 0.0


def test_padding_with_minus_inf_logprobs_gives_finite_gradients():
    logp = torch.tensor([math.log(0.5), -math.inf], dtype=torch.float64).requires_grad_()
    inputs = LossInputs(
        trainer_logprobs=logp,
        inference_logprobs=torch.tensor([math.log(0.5), -math.inf], dtype=torch.float64),
        advantages=torch.tensor([1.0, 1.0], dtype=torch.float64),
        loss_mask=torch.tensor([True, False]),
        rl_weights=None,
    )
    out = _loss()(inputs)
    out.loss.sum().backward()
    assert torch.isfinite(logp.grad).all()
    assert logp.grad.tolist() == pytest.approx([-1.0, 0.0])


def test_score_centering_subtracts_the_expected_score():
    inputs = _inputs(
        loss_mask=torch.tensor([True, False, False, False]),
        rl_weights=torch.tensor([0.5, 0.0, 0.0, 0.0], dtype=torch.float64),
    )
    # sampling mask of two ids per token; token 0: sampler (.6, .4), trainer (.5, .5)
    trainer_mask = torch.tensor([[0.5, 0.5]] * 4, dtype=torch.float64).log().requires_grad_()
    sampler_mask = torch.tensor([[0.6, 0.4]] * 4, dtype=torch.float64).log()
    inputs.trainer_mask_logprobs = trainer_mask
    inputs.inference_mask_logprobs = sampler_mask
    out = _loss(score_centering=True)(inputs)
    # both ids inside the region, coef = q * p/q = p = .5; term = w A sum coef log p
    centering = 0.5 * 2 * (0.5 * math.log(0.5) * 2)
    assert out.loss[0].item() == pytest.approx(-0.5 * 2 * 1.25 + centering)
    out.loss.sum().backward()
    assert trainer_mask.grad[0].tolist() == pytest.approx([0.5, 0.5])
    assert trainer_mask.grad[1:].abs().sum().item() == 0.0


def test_score_centering_without_sampling_mask_is_an_error():
    with pytest.raises(ValueError, match="score_centering"):
        _loss(score_centering=True)(_inputs())


@pytest.mark.parametrize("field", ["eps", "max_importance_ratio"])
def test_nonpositive_fields_are_rejected_by_name(field):
    with pytest.raises(ValidationError, match=field):
        IPOLoss.Config(**{field: 0})
