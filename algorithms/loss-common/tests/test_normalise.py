"""Normalisation of ``docs/algorithms.md`` on two micro-batches, checked by hand."""

import math
from typing import ClassVar

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st
from prl_loss_common import (
    ComponentSums,
    Scales,
    component_losses,
    global_scales,
    local_scales,
    normalise,
    weights_or_ones,
    zero_where,
)

from prl.contracts.loss import Loss, LossInputs, LossOutputs


class Reinforce(Loss):
    """-w * A * log p on the rl tokens; records the mask it was given."""

    type: ClassVar[str] = "test-reinforce"

    def __init__(self):
        self.seen_masks = []

    def __call__(self, inputs: LossInputs) -> LossOutputs:
        self.seen_masks.append(inputs.loss_mask.tolist())
        weights = weights_or_ones(inputs.rl_weights, inputs.trainer_logprobs)
        per_token = -weights * inputs.advantages * inputs.trainer_logprobs
        return LossOutputs(loss=zero_where(inputs.loss_mask, per_token))


def _t(values):
    return torch.tensor(values, dtype=torch.float64)


def _mb(logp, mask, adv, rl_w, ce_w):
    return dict(
        inputs=LossInputs(
            trainer_logprobs=_t(logp).log().requires_grad_(),
            inference_logprobs=_t(logp).log(),
            advantages=_t(adv),
            loss_mask=torch.tensor(mask),
            rl_weights=None if rl_w is None else _t(rl_w),
        ),
        ce=None if ce_w is None else _t(ce_w),
    )


def test_scales_sum_weights_and_count_tokens():
    local = local_scales(torch.tensor([True, True, False]), _t([1.0, 0.5, 3.0]), _t([0, 0, 2.0]), _t([1.0, 1, 0]))
    assert local == Scales(rl=1.5, ce=1.0, ref_kl=2.0)
    assert local_scales(torch.tensor([True, False, True])) == Scales(rl=2.0)
    total = sum([local, Scales(rl=1.0, ce=2.0)])
    assert total == Scales(rl=2.5, ce=3.0, ref_kl=2.0)
    assert global_scales(total) == total  # no process group: unchanged


def test_two_micro_batches_match_the_global_formula():
    mbs = [
        _mb([0.5, 0.25, 0.5], [True, True, False], [1.0, 2.0, 9.0], [1.0, 0.5, 0.0], [0.0, 0.0, 1.0]),
        _mb([0.5, 0.125], [True, True], [-1.0, 4.0], [2.0, 0.0], [1.0, 0.0]),
    ]
    scales = global_scales(sum(local_scales(m["inputs"].loss_mask, m["inputs"].rl_weights, m["ce"]) for m in mbs))
    assert scales == Scales(rl=3.5, ce=2.0, ref_kl=0.0)
    loss = Reinforce()
    total = 0.0
    for m in mbs:
        sums = component_losses(loss, m["inputs"], ce_weights=m["ce"])
        part = normalise(sums, scales)
        part.backward()
        total += part.item()
    ln2 = math.log(2)
    rl = (1 * 1 * ln2 + 0.5 * 2 * 2 * ln2) + (2 * -1 * ln2)  # -w A log p summed
    ce = ln2 + ln2  # -log .5 on mb 0's token 2 and mb 1's token 0
    assert total == pytest.approx(rl / 3.5 + ce / 2.0)
    # the weight-0 token of mb 1 never reached the rl loss
    assert loss.seen_masks == [[True, True, False], [True, False]]
    # gradients: rl -w A / 3.5, ce -w / 2
    assert mbs[0]["inputs"].trainer_logprobs.grad.tolist() == pytest.approx([-1 / 3.5, -1 / 3.5, -0.5])
    assert mbs[1]["inputs"].trainer_logprobs.grad.tolist() == pytest.approx([2 / 3.5 - 0.5, 0.0])


def test_empty_components_still_give_a_backward_able_zero():
    mb = _mb([0.5], [False], [1.0], [1.0], None)
    sums = component_losses(Reinforce(), mb["inputs"])
    out = normalise(sums, Scales())
    assert out.item() == 0.0 and out.requires_grad
    out.backward()
    assert mb["inputs"].trainer_logprobs.grad.tolist() == [0.0]


def test_metrics_of_all_components_are_merged():
    mb = _mb([0.5, 0.5], [True, False], [1.0, 1.0], None, [0.0, 1.0])
    mb["inputs"].ref_logprobs = _t([0.25, 0.25]).log()
    sums = component_losses(Reinforce(), mb["inputs"], ce_weights=mb["ce"], ref_kl_weights=_t([1.0, 0.0]))
    assert {"nll", "ref_kl", "ref_kl/is_masked"} <= set(sums.metrics)
    assert sums.ref_kl.item() == pytest.approx(math.log(2))


def test_extra_inputs_reach_the_rl_loss_and_the_caller_keeps_its_mask():
    seen = []

    class Probe(Reinforce):
        def __call__(self, inputs):
            seen.append(getattr(inputs, "trainer_mask_logprobs", None))
            return super().__call__(inputs)

    mb = _mb([0.5, 0.5], [True, True], [1.0, 1.0], [1.0, 0.0], None)
    mb["inputs"].trainer_mask_logprobs = "extra"
    component_losses(Probe(), mb["inputs"])
    assert seen == ["extra"]
    assert mb["inputs"].loss_mask.tolist() == [True, True]


@settings(max_examples=25, deadline=None)
@given(
    tokens=st.lists(
        st.tuples(
            st.floats(0.05, 0.95),  # p
            st.booleans(),  # in loss_mask
            st.sampled_from([0.0, 0.5, 1.0, 2.0]),  # rl weight
            st.sampled_from([0.0, 1.0]),  # ce weight
        ),
        min_size=2,
        max_size=12,
    ),
    cuts=st.lists(st.integers(1, 11), max_size=3),
)
def test_any_split_into_micro_batches_gives_the_same_loss_and_gradient(tokens, cuts):
    probs, mask, rl_w, ce_w = (list(col) for col in zip(*tokens, strict=False))
    logp = _t(probs).log().requires_grad_()
    adv = _t([1.0 - i * 0.3 for i in range(len(tokens))])

    def run(bounds):
        pieces = [
            LossInputs(
                trainer_logprobs=logp[a:b],
                inference_logprobs=logp[a:b].detach(),
                advantages=adv[a:b],
                loss_mask=torch.tensor(mask[a:b]),
                rl_weights=_t(rl_w[a:b]),
            )
            for a, b in bounds
        ]
        ces = [_t(ce_w[a:b]) for a, b in bounds]
        scales = global_scales(
            sum(local_scales(p.loss_mask, p.rl_weights, c) for p, c in zip(pieces, ces, strict=False))
        )
        total = sum(
            normalise(component_losses(Reinforce(), p, ce_weights=c), scales) for p, c in zip(pieces, ces, strict=False)
        )
        (grad,) = torch.autograd.grad(total, logp)
        return total.item(), grad

    n = len(tokens)
    edges = sorted({0, n, *(c for c in cuts if c < n)})
    whole, whole_grad = run([(0, n)])
    split, split_grad = run(list(zip(edges, edges[1:], strict=False)))
    assert split == pytest.approx(whole)
    assert torch.allclose(split_grad, whole_grad)


class _TwoRanks:
    """A stand-in for torch.distributed: the caller's ``group`` spans this rank and one other
    whose scales are ``other``; calls are recorded in ``seen``."""

    def __init__(self, backend, other, group):
        self.backend, self.other, self.group, self.seen = backend, other, group, []

    def install(self, monkeypatch):
        monkeypatch.setattr(dist, "is_available", lambda: True)
        monkeypatch.setattr(dist, "is_initialized", lambda: True)
        monkeypatch.setattr(dist, "get_backend", self.get_backend)
        monkeypatch.setattr(dist, "all_reduce", self.all_reduce)
        monkeypatch.setattr(torch.Tensor, "cuda", lambda t: self.seen.append("cuda") or t)

    def get_backend(self, group=None):
        # the default group of this fake runs gloo: only the caller's group has ``backend``
        return self.backend if group is self.group else "gloo"

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):  # torch's signature
        self.seen.append((tensor.dtype, op, group))
        other = torch.tensor(self.other, dtype=tensor.dtype)
        tensor.copy_(tensor + other if op == dist.ReduceOp.SUM else torch.maximum(tensor, other))


def test_global_scales_sum_every_rank_exactly(monkeypatch):
    # 2^24 + 1 rl tokens: float32 would round the count and shift every gradient
    group = object()
    ranks = _TwoRanks("gloo", [1.0, 2.0, 3.0], group)
    ranks.install(monkeypatch)
    total = global_scales(Scales(rl=2.0**24, ce=5.0, ref_kl=0.0), group=group)
    assert total == Scales(rl=2.0**24 + 1, ce=7.0, ref_kl=3.0)
    assert ranks.seen == [(torch.float64, dist.ReduceOp.SUM, group)]


def test_global_scales_move_the_buffer_to_the_gpu_for_nccl_only(monkeypatch):
    group = object()
    ranks = _TwoRanks("nccl", [0.0, 0.0, 0.0], group)
    ranks.install(monkeypatch)
    global_scales(Scales(rl=1.0), group=group)
    assert ranks.seen[0] == "cuda"
    ranks = _TwoRanks("gloo", [0.0, 0.0, 0.0], group)
    ranks.install(monkeypatch)
    global_scales(Scales(rl=1.0), group=group)
    assert "cuda" not in ranks.seen


def test_a_scale_below_one_still_divides():
    # a rl weight sum of 0.5 (one token of weight .5) doubles the rl sum
    sums = component_losses(Reinforce(), _mb([0.5], [True], [1.0], [0.5], None)["inputs"])
    out = normalise(sums, Scales(rl=0.5))
    assert out.item() == pytest.approx(0.5 * math.log(2) / 0.5)


def test_scales_refuse_to_add_anything_but_scales_or_zero():
    with pytest.raises(TypeError):
        1 + Scales()  # noqa: B018
    assert 0 + Scales(rl=2.0) == Scales(rl=2.0)


def test_scales_add_every_component():
    assert Scales(1.0, 2.0, 3.0) + Scales(10.0, 20.0, 30.0) == Scales(11.0, 22.0, 33.0)


def test_normalise_divides_each_component_by_its_own_scale():
    sums = ComponentSums(rl=_t(1.0), ce=_t(2.0), ref_kl=_t(3.0))
    assert normalise(sums, Scales(rl=2.0, ce=4.0, ref_kl=6.0)).item() == pytest.approx(1.5)


def test_ref_kl_component_runs_exactly_when_some_token_has_a_ref_kl_weight():
    mb = _mb([0.5, 0.5], [True, True], [1.0, 1.0], None, None)
    mb["inputs"].ref_logprobs = _t([0.25, 0.25]).log()
    # all weights 1: both tokens give −(log .25 − log .5) = log 2
    sums = component_losses(Reinforce(), mb["inputs"], ref_kl_weights=_t([1.0, 1.0]))
    assert sums.ref_kl.item() == pytest.approx(2 * math.log(2))
    # all weights 0: no ref_kl term and no ref_kl metrics
    sums = component_losses(Reinforce(), mb["inputs"], ref_kl_weights=_t([0.0, 0.0]))
    assert sums.ref_kl.item() == 0.0
    assert not any(k.startswith("ref_kl") for k in sums.metrics)


def test_tokens_with_rl_weight_zero_leave_the_rl_loss_uncalled_unless_flags_say_otherwise():
    from prl_loss_common import components_present

    loss = Reinforce()
    mb = _mb([0.5, 0.5], [True, True], [1.0, 1.0], [0.0, 0.0], [1.0, 1.0])
    flags = components_present(mb["inputs"].loss_mask, mb["inputs"].rl_weights, mb["ce"])
    assert flags == (False, True, False)
    sums = component_losses(loss, mb["inputs"], ce_weights=mb["ce"])
    assert loss.seen_masks == [] and sums.rl.item() == 0.0 and sums.ce.item() > 0
    # precomputed flags are what decides (the trainer reads them before the forward pass)
    component_losses(loss, mb["inputs"], ce_weights=mb["ce"], present=(True, False, False))
    assert loss.seen_masks == [[False, False]]
