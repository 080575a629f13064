"""Fixed components and ratio helpers against hand-computed values."""

import math

import pytest
import torch
from prl_loss_common import capped_ratio, ce_loss, masked_mean, mismatch_kl, ref_kl_loss


def _t(values, grad=False):
    return torch.tensor(values, dtype=torch.float64, requires_grad=grad)


def test_capped_ratio_value_and_gradient():
    log_r = _t([math.log(0.5), math.log(3.0)], grad=True)
    ratio = capped_ratio(log_r, 2.0)
    assert ratio.tolist() == pytest.approx([0.5, 2.0])
    ratio.sum().backward()
    # below the cap exactly dr/dl = r; above it the gradient keeps flowing at the cap
    assert log_r.grad.tolist() == pytest.approx([0.5, 2.0])


def test_mismatch_kl_is_k3_and_finite_for_extreme_ratios():
    kl = mismatch_kl(_t([0.0, math.log(2.0), -1.0, 1e4]))
    assert kl[:3].tolist() == pytest.approx([0.0, 1 - math.log(2.0), math.exp(-1) - 1 + 1])
    assert math.isfinite(kl[3].item())


def test_masked_mean_is_zero_on_an_empty_mask():
    assert float(masked_mean(_t([math.inf, 1.0]), torch.tensor([False, False]))) == 0.0
    assert float(masked_mean(_t([math.inf, 4.0]), torch.tensor([False, True]))) == 4.0


def test_ce_is_weighted_nll_on_nonzero_weights():
    logp = _t([math.log(0.5), math.log(0.25), math.log(0.5)], grad=True)
    out = ce_loss(logp, _t([0.0, 1.0, 2.0]))
    assert out.loss.tolist() == pytest.approx([0.0, math.log(4), 2 * math.log(2)])
    out.loss.sum().backward()
    assert logp.grad.tolist() == pytest.approx([0.0, -1.0, -2.0])
    assert float(out.metrics["nll"]) == pytest.approx((math.log(4) + math.log(2)) / 2)


def test_ref_kl_trust_region_and_gradient():
    # p .5/.1/.6, q .5/.4/.5: token 1 fell by .3 (> .2) and is dropped
    logp = _t([0.5, 0.1, 0.6]).log().detach().requires_grad_()
    q = _t([0.5, 0.4, 0.5]).log()
    ref = _t([0.25, 0.5, 0.6]).log()
    out = ref_kl_loss(logp, q, ref, _t([1.0, 1.0, 1.0]))
    # token 0: -(log .25 - log .5) * 1; token 2: log ref = log p, so 0
    assert out.loss.tolist() == pytest.approx([math.log(2), 0.0, 0.0])
    out.loss.sum().backward()
    # d/dlog p = -sg(log ref - log p) * r
    assert logp.grad.tolist() == pytest.approx([math.log(2), 0.0, 0.0])
    assert float(out.metrics["ref_kl/is_masked"]) == pytest.approx(1 / 3)
    assert float(out.metrics["ref_kl"]) == pytest.approx((math.log(2) + math.log(0.2)) / 3)
    assert float(out.metrics["ref_kl/masked_mismatch_kl"]) == pytest.approx(0.25 - 1 - math.log(0.25))
    assert float(out.metrics["ref_kl/unmasked_mismatch_kl"]) == pytest.approx((0.2 - math.log(1.2)) / 2)


def test_ref_kl_without_ref_logprobs_is_an_error():
    with pytest.raises(ValueError, match="ref_logprobs"):
        ref_kl_loss(_t([-1.0]), _t([-1.0]), None, _t([1.0]))


def test_ref_kl_missing_ref_message_names_the_fix():
    with pytest.raises(ValueError, match=r"^ref_kl_weights are set but ref_logprobs is missing; .* \(opd, opsd\)$"):
        ref_kl_loss(_t([-1.0, -2.0]), _t([-1.0, -2.0]), None, _t([0.0, 1.0]))


def test_ref_kl_without_ref_logprobs_and_without_weights_is_a_zero_loss():
    logp = _t([-1.0, -2.0], grad=True)
    out = ref_kl_loss(logp, _t([-1.5, -2.0]), None, _t([0.0, 0.0]))
    assert out.loss.tolist() == [0.0, 0.0]
    assert float(out.metrics["ref_kl"]) == 0.0


def test_ref_kl_keeps_a_token_whose_probability_fell_by_exactly_the_limit():
    # p .3, q .5: p − q is exactly −0.2 in float64, so the "fell more than 0.2" rule keeps it
    logp = _t([0.3, 0.3]).log().detach().requires_grad_()
    q = _t([0.5, 0.5]).log()
    assert (logp.exp() - q.exp()).tolist() == [-0.2, -0.2]
    out = ref_kl_loss(logp, q, _t([0.15, 0.3]).log(), _t([1.0, 1.0]))
    # token 0: −(log .15 − log .3) · r = log 2 · 0.6
    assert out.loss.tolist() == pytest.approx([math.log(2) * 0.6, 0.0])
    assert float(out.metrics["ref_kl/is_masked"]) == 0.0


def test_ref_kl_caps_the_ratio_at_1e4():
    # p .2, q 1e-5: r = 2e4 is capped at 1e4 (p rose, so the trust region keeps the token)
    logp = _t([0.2]).log().detach().requires_grad_()
    out = ref_kl_loss(logp, _t([1e-5]).log(), _t([0.1]).log(), _t([2.0]))
    assert out.loss.tolist() == pytest.approx([2.0 * math.log(2) * 1e4])
    out.loss.sum().backward()
    assert logp.grad.tolist() == pytest.approx([2.0 * math.log(2) * 1e4])


def test_ref_kl_metrics_and_gradients_ignore_tokens_without_weight():
    # token 0: covered, p = q. token 1: weight 0, p fell by .4 (would be dropped).
    # token 2: weight 0, p rose (would be kept). token 3: weight 0, padding (−inf).
    logp = _t([0.5, 0.1, 0.9, 0.0]).log().detach().requires_grad_()
    q = _t([0.5, 0.5, 0.3, 0.0]).log()
    ref = _t([0.25, 0.5, 0.5, 0.0]).log()
    out = ref_kl_loss(logp, q, ref, _t([1.0, 0.0, 0.0, 0.0]))
    assert out.loss.tolist() == pytest.approx([math.log(2), 0.0, 0.0, 0.0])
    out.loss.sum().backward()
    assert logp.grad.tolist() == pytest.approx([math.log(2), 0.0, 0.0, 0.0])
    assert float(out.metrics["ref_kl/is_masked"]) == 0.0
    assert float(out.metrics["ref_kl/masked_mismatch_kl"]) == 0.0
    assert float(out.metrics["ref_kl/unmasked_mismatch_kl"]) == 0.0
    assert float(out.metrics["ref_kl"]) == pytest.approx(math.log(2))


def test_ce_loss_keeps_the_logprob_dtype():
    logp = torch.tensor([math.log(0.5), math.log(0.25)], dtype=torch.float32)
    out = ce_loss(logp, _t([1.0, 0.0]))
    assert out.loss.dtype == torch.float32
    assert out.loss.tolist() == pytest.approx([math.log(2), 0.0])


def test_ref_kl_loss_keeps_the_logprob_dtype():
    logp = torch.tensor([math.log(0.5)], dtype=torch.float32)
    out = ref_kl_loss(logp, logp, torch.tensor([math.log(0.25)], dtype=torch.float32), _t([1.0]))
    assert out.loss.dtype == torch.float32
    assert out.loss.tolist() == pytest.approx([math.log(2)])
