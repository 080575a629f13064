"""IPO against hand-computed values: trust region, cap, weights, gradients, centering."""

import math

import pytest
import torch
from prl_loss_common import abs_prob_diff
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


def test_score_centering_names_itself_as_needing_sampling_masks():
    # prl rl's config check reads this to refuse a run that cannot deliver the masks
    assert IPOLoss.Config(score_centering=True).sampling_mask_field() == "score_centering"
    assert IPOLoss.Config(score_centering=False).sampling_mask_field() is None


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


def test_a_token_exactly_eps_away_is_kept():
    # set eps to the |p − q| the loss itself computes for token 0, so it sits on the edge
    inputs = _inputs()
    eps = float(abs_prob_diff(inputs.trainer_logprobs[:1], inputs.inference_logprobs[:1]))
    out = _loss(eps=eps)(inputs)
    assert out.loss[0].item() == pytest.approx(-2.5)
    assert float(out.metrics["is_masked"]) == pytest.approx(1 / 3)


def test_a_token_the_sampler_gave_probability_zero_is_dropped_with_a_finite_gradient():
    # q = 0 (logprob −inf): r is infinite, |p − q| = .5 > eps, so the token is dropped
    inputs = _inputs(inference_logprobs=torch.tensor([0.4, 0.0, 0.5, 0.3], dtype=torch.float64).log())
    out = _loss()(inputs)
    out.loss.sum().backward()
    assert inputs.trainer_logprobs.grad.tolist() == pytest.approx([-2.5, 0.0, 0.0, 0.0])
    assert out.loss.tolist() == pytest.approx([-2.5, 0.0, 0.0, 0.0])


def _centering_inputs(trainer_ids, sampler_ids):
    inputs = _inputs(
        loss_mask=torch.tensor([True, False, False, False]),
        rl_weights=torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64),
    )
    inputs.trainer_mask_logprobs = torch.tensor([trainer_ids] * 4, dtype=torch.float64).log().requires_grad_()
    inputs.inference_mask_logprobs = torch.tensor([sampler_ids] * 4, dtype=torch.float64).log()
    return inputs


def test_score_centering_caps_the_ratio_and_drops_ids_outside_the_region():
    # ids of token 0: (p .3, q .1): r 3, capped at 2, so c = 2 and q · c = .2;
    # (p .45, q .85): |p − q| .4 > eps, c = 0; (p .05, q .05): r 1, q · c = .05;
    # sampler padding (−inf) contributes nothing
    inputs = _centering_inputs([0.3, 0.45, 0.05, 0.2], [0.1, 0.85, 0.05, 0.0])
    out = _loss(score_centering=True, max_importance_ratio=2.0)(inputs)
    out.loss.sum().backward()
    # the rl token's own term: p .5 q .4, r 1.25 (under the cap), w 1, A 2
    expected = -2 * 1.25 + 2 * (0.2 * math.log(0.3) + 0.05 * math.log(0.05))
    assert out.loss[0].item() == pytest.approx(expected)
    assert inputs.trainer_mask_logprobs.grad[0].tolist() == pytest.approx([2 * 0.2, 0.0, 2 * 0.05, 0.0])


def test_score_centering_keeps_an_id_exactly_eps_away():
    inputs = _centering_inputs([0.5, 0.5], [0.25, 0.75])
    p = inputs.trainer_mask_logprobs.detach().exp()
    q = inputs.inference_mask_logprobs.exp()
    eps = (p - q).abs()[0, 0].item()
    assert eps == (p - q).abs()[0, 1].item() == 0.25
    out = _loss(score_centering=True, eps=0.25)(inputs)
    out.loss.sum().backward()
    # both ids kept: q · p/q = p = .5 each
    assert inputs.trainer_mask_logprobs.grad[0].tolist() == pytest.approx([1.0, 1.0])


def test_score_centering_message_names_both_inputs_and_the_way_out():
    message = (
        r"^score_centering needs the sampling-mask logprobs \(trainer_mask_logprobs, inference_mask_logprobs\); "
        r"enable truncated sampling \(top_p < 1 or top_k\) or set score_centering = false$"
    )
    with pytest.raises(ValueError, match=message):
        _loss(score_centering=True)(_inputs())
    inputs = _centering_inputs([0.5, 0.5], [0.5, 0.5])
    inputs.trainer_mask_logprobs = None
    with pytest.raises(ValueError, match=message):
        _loss(score_centering=True)(inputs)


def test_score_centering_on_inputs_without_mask_fields_gives_the_same_error():
    # a trainer may hand any object with the LossInputs fields; one that lacks the
    # sampling-mask fields altogether must get the explanation, not an AttributeError
    from types import SimpleNamespace

    base = _inputs()
    fields = ("trainer_logprobs", "inference_logprobs", "advantages", "loss_mask", "rl_weights")
    inputs = SimpleNamespace(**{f: getattr(base, f) for f in fields})
    with pytest.raises(ValueError, match="score_centering needs the sampling-mask logprobs"):
        _loss(score_centering=True)(inputs)
    inputs.trainer_mask_logprobs = torch.zeros(4, 1, dtype=torch.float64)
    with pytest.raises(ValueError, match="score_centering needs the sampling-mask logprobs"):
        _loss(score_centering=True)(inputs)
