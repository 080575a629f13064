"""IPO's trust region is two-sided: |p − q| > eps drops a token whichever way p moved.

test_ipo.py only has a token whose probability fell out of the band, so a trust region that
ignored rises (the ref_kl component's one-sided rule, say) would still pass it. A user
would see stale tokens whose probability jumped keep pushing the policy with a large
importance ratio, and ``is_masked`` under-report the drift.
"""

import pytest
import torch
from prl_loss_ipo.loss import IPOLoss

from prl.contracts.loss import LossInputs

EPS = 0.3

# (p, q) per token, all rl tokens with advantage 1 and weight 1. The in-band pair on each
# side sits 0.05 inside eps so float rounding of p − q cannot move it across the edge.
ROSE_OUT = (0.8, 0.4)  # p − q = 0.4 > eps: probability rose beyond the band
FELL_OUT = (0.1, 0.5)  # q − p = 0.4 > eps: probability fell beyond the band
ROSE_IN = (0.65, 0.4)  # p − q = 0.25: inside
FELL_IN = (0.2, 0.45)  # q − p = 0.25: inside
SAME = (0.5, 0.5)  # no drift: inside


def _run(tokens):
    p = torch.tensor([t[0] for t in tokens], dtype=torch.float64)
    q = torch.tensor([t[1] for t in tokens], dtype=torch.float64)
    logp = p.log().requires_grad_()
    n = len(tokens)
    inputs = LossInputs(
        trainer_logprobs=logp,
        inference_logprobs=q.log(),
        advantages=torch.ones(n, dtype=torch.float64),
        loss_mask=torch.ones(n, dtype=torch.bool),
        rl_weights=torch.ones(n, dtype=torch.float64),
    )
    out = IPOLoss(IPOLoss.Config(eps=EPS))(inputs)
    out.loss.sum().backward()
    return out, logp.grad


def test_tokens_leaving_the_band_on_either_side_are_dropped_and_counted():
    tokens = [ROSE_OUT, FELL_OUT, ROSE_IN, FELL_IN, SAME]
    out, grad = _run(tokens)
    # Kept tokens: loss −A·r and d/dlog p the same (dr/dlog p = r), with r = p/q.
    ratios = [p / q for p, q in tokens]
    expected = [0.0, 0.0, -ratios[2], -ratios[3], -1.0]
    assert out.loss.tolist() == pytest.approx(expected)
    assert grad.tolist() == pytest.approx(expected)
    assert float(out.metrics["is_masked"]) == pytest.approx(2 / 5)


@pytest.mark.parametrize(
    ("outside", "inside"),
    [(ROSE_OUT, ROSE_IN), (FELL_OUT, FELL_IN)],
    ids=["probability-rose", "probability-fell"],
)
def test_each_direction_alone_drops_only_the_out_of_band_token(outside, inside):
    # One direction per case, so a failure names the side the band forgot.
    out, grad = _run([outside, inside])
    assert grad[0].item() == 0.0, "token beyond the band still has a gradient"
    assert out.loss[0].item() == 0.0
    assert grad[1].item() == pytest.approx(-inside[0] / inside[1]), "token inside the band lost its gradient"
    assert float(out.metrics["is_masked"]) == pytest.approx(0.5)
