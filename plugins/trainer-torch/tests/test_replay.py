"""Sampling replay against hand-computed values: kept-set renormalisation, its gradient,
the mask-mismatch metric, and the mask logprobs handed to the loss."""

from __future__ import annotations

import math

import pytest
import torch
from prl_trainer_torch.replay import pad_masks, policy_head
from prl_trainer_torch.rl_step import _plain, forward_tokens, merge_stats, run_micro_batches, to_micro_batch

from prl.contracts.loss import Loss, LossOutputs
from prl.orchestrator.packing import micro_batch
from prl.types import TrainingSample

CPU = torch.device("cpu")
LOGITS = [2.0, 1.0, 0.0, -1.0]


def _head(kept, target, temperature=1.0):
    """One position whose hidden state equals its logits (identity output matrix)."""
    hidden = torch.tensor([[LOGITS]], requires_grad=True)
    ids, valid, _ = pad_masks([kept])
    out = policy_head(
        hidden, torch.eye(4), torch.tensor([[target]]), torch.tensor([[temperature]]), 4, True, (ids[None], valid[None])
    )
    return hidden, out


def test_logprob_is_renormalised_over_the_kept_ids():
    hidden, (logp, _, mask_logp, mismatch) = _head([0, 1], target=1)
    norm = math.log(math.exp(2) + math.exp(1))
    assert mask_logp[0, 0].tolist() == pytest.approx([2 - norm, 1 - norm])
    assert logp.item() == pytest.approx(1 - norm)  # untruncated would be 1 - logsumexp(all four)
    assert not mismatch.item()
    logp.sum().backward()
    p0, p1 = math.exp(2 - norm), math.exp(1 - norm)
    # d log p_S(1) / dz = onehot(1) − p_S, zero outside the kept set
    assert hidden.grad[0, 0].tolist() == pytest.approx([-p0, 1 - p1, 0.0, 0.0])


def test_the_sampling_temperature_is_applied_before_renormalising():
    _, (logp, *_) = _head([0, 1], target=1, temperature=2.0)
    assert logp.item() == pytest.approx(0.5 - math.log(math.exp(1.0) + math.exp(0.5)))


def test_a_kept_set_that_is_not_the_trainers_top_set_is_a_mismatch_not_an_error():
    _, (logp, _, mask_logp, mismatch) = _head([0, 2], target=2)
    assert mismatch.item()  # the trainer's top two are {0, 1}
    assert logp.item() == pytest.approx(0.0 - math.log(math.exp(2) + 1.0))
    # a sampled id outside its own mask keeps the untruncated logprob and counts as a mismatch
    _, (logp, _, _, mismatch) = _head([0, 1], target=3)
    assert mismatch.item()
    assert logp.item() == pytest.approx(-1.0 - math.log(sum(math.exp(z) for z in LOGITS)))


class TinyPolicy(torch.nn.Module):
    """Embedding rows as hidden states, scored by an output matrix through the trainer's head."""

    def __init__(self, vocab: int = 8, dim: int = 5) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))
        self.head = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))

    def forward(self, input_ids, position_ids, targets, temps, entropy=False, replay=None, bounds=None):
        return policy_head(self.emb[input_ids], self.head, targets, temps, 3, entropy, replay)


def _raw(masks, mask_lps=None):
    n = len(masks)
    sample = TrainingSample(
        input_ids=[1, 2, 3, 4], loss_mask=[False, True, True, True], advantages=[1.0] * n,
        inference_logprobs=[-1.0] * n, temperature=1.0, rl_weights=[1.0] * n, ce_weights=[0.0] * n,
        ref_kl_weights=[0.0] * n, env_name="e",
    )  # fmt: skip
    raw = micro_batch([sample])
    raw["sampling_mask"] = masks
    if mask_lps is not None:
        raw["sampling_mask_logprobs"] = mask_lps
    return raw


class _Capture(Loss):
    type = "capture"

    def __init__(self) -> None:
        self.seen = []

    def __call__(self, inputs):
        self.seen.append(inputs)
        return LossOutputs(loss=-inputs.trainer_logprobs * inputs.loss_mask)


def test_mask_logprobs_reach_the_loss_aligned_with_their_tokens():
    policy = TinyPolicy()
    # token 2 kept {2, 5}; token 3 untruncated; token 4 kept {4, 0, 1}
    mb = to_micro_batch(_raw([[], [2, 5], [], [4, 0, 1]], [[], [-0.1, -2.4], [], [-0.5, -1.0, -2.0]]), CPU)
    loss = _Capture()
    stats = run_micro_batches(policy, loss, [mb], world=1)
    inputs = loss.seen[0]
    z = policy.head @ policy.emb[1]  # position 0 predicts token 2
    expected = (z[[2, 5]] - torch.logsumexp(z[[2, 5]], 0)).tolist()
    assert inputs.trainer_mask_logprobs[1, :2].tolist() == pytest.approx(expected, abs=1e-6)
    assert inputs.trainer_logprobs[1].item() == pytest.approx(expected[0], abs=1e-6)
    full = torch.log_softmax(policy.head @ policy.emb[2], 0)[3].item()  # token 3: no mask, untruncated
    assert inputs.trainer_logprobs[2].item() == pytest.approx(full, abs=1e-6)
    assert torch.isinf(inputs.trainer_mask_logprobs[2]).all()
    # the sampler's untruncated logprobs, renormalised over each kept set; its token logprob too
    lse = math.log(math.exp(-0.5) + math.exp(-1.0) + math.exp(-2.0))
    assert inputs.inference_mask_logprobs[3].tolist() == pytest.approx([-0.5 - lse, -1.0 - lse, -2.0 - lse])
    assert torch.isinf(inputs.inference_mask_logprobs[1, 2])
    lse1 = math.log(math.exp(-0.1) + math.exp(-2.4))
    assert inputs.inference_logprobs.tolist() == pytest.approx([-1.0, -1.0 - lse1, -1.0, -1.0 - lse])
    # the metric: masked loss tokens whose kept set is not the trainer's top set, as a fraction
    top = {
        i: set((policy.head @ policy.emb[prev]).topk(len(m)).indices.tolist())
        for i, prev, m in ((1, 1, [2, 5]), (3, 3, [4, 0, 1]))
    }
    wrong = (top[1] != {2, 5}) + (top[3] != {4, 0, 1})
    metrics = merge_stats([_plain(stats)])
    assert metrics["mismatch/sampling_mask"] == pytest.approx(wrong / 2)


def test_the_trainers_own_top_set_gives_no_mismatch():
    policy = TinyPolicy()
    masks = [[]]
    for prev in (1, 2, 3):
        masks.append((policy.head @ policy.emb[prev]).topk(3).indices.tolist())
    mb = to_micro_batch(_raw(masks), CPU)
    out = forward_tokens(policy, mb)
    sampled_outside = [i in (1, 2, 3) and mb.input_ids[i].item() not in masks[i] for i in range(4)]
    assert out.mask_mismatch.tolist() == sampled_outside
    metrics = merge_stats([_plain(run_micro_batches(policy, _Capture(), [mb], world=1))])
    assert metrics["mismatch/sampling_mask"] == pytest.approx(sum(sampled_outside) / 3)


def test_batches_without_masks_report_no_replay_metric():
    mb = to_micro_batch(_raw([[], [], [], []]), CPU)
    assert mb.mask_ids is None
    metrics = merge_stats([_plain(run_micro_batches(TinyPolicy(), _Capture(), [mb], world=1))])
    assert "mismatch/sampling_mask" not in metrics


def test_mask_logprobs_that_do_not_match_the_mask_are_named():
    from prl.config.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^sampling_mask_logprobs: must give one logprob per kept id"):
        to_micro_batch(_raw([[], [2, 5], [], []], [[], [-0.1], [], []]), CPU)
    # ids without logprobs (a backend that reports only the mask) still replay the trainer side
    mb = to_micro_batch(_raw([[], [2, 5], [], []], [[], [], [], []]), CPU)
    assert mb.mask_inference is None and mb.inference_logprobs.tolist() == [-1.0] * 4


def test_replay_counts_add_over_micro_batches_and_ranks():
    policy = TinyPolicy()
    # tokens 2 and 4 were sampled outside their own kept sets: both are mismatches
    mb = to_micro_batch(_raw([[], [5, 6], [], [6, 7]]), CPU)
    alone = _plain(run_micro_batches(policy, _Capture(), [mb], world=1))
    assert (alone["replay_tokens"], alone["replay_mismatch"]) == (2.0, 2.0)
    twice = _plain(run_micro_batches(policy, _Capture(), [mb, mb], world=1))
    assert (twice["replay_tokens"], twice["replay_mismatch"]) == (4.0, 4.0)
    # over ranks the sums add before the division, whichever rank comes first
    a = {**alone, "replay_tokens": 1.0, "replay_mismatch": 1.0}
    b = {**alone, "replay_tokens": 3.0, "replay_mismatch": 0.0}
    assert merge_stats([a, b])["mismatch/sampling_mask"] == pytest.approx(0.25)
    assert merge_stats([b, a])["mismatch/sampling_mask"] == pytest.approx(0.25)
    assert merge_stats([a])["mismatch/sampling_mask"] == 1.0  # one masked token is enough to report
    # a rank whose sums carry no replay counts adds nothing
    bare = {k: v for k, v in alone.items() if not k.startswith("replay")}
    assert merge_stats([a, bare])["mismatch/sampling_mask"] == pytest.approx(1.0)
    assert merge_stats([bare, b])["mismatch/sampling_mask"] == pytest.approx(0.0)


def test_before_last_backward_runs_once_after_all_other_backwards():
    # full_offload steps the optimizer inside the last backward; its hook is armed here
    policy = TinyPolicy()
    mbs = [to_micro_batch(_raw([[]] * 4), CPU) for _ in range(3)]
    seen = []
    run_micro_batches(
        policy, _Capture(), mbs, world=1, before_last_backward=lambda: seen.append(policy.head.grad.clone())
    )
    assert len(seen) == 1
    # identical micro-batches add equal gradients: two of three were in when the hook ran
    assert torch.allclose(seen[0] * 1.5, policy.head.grad)
