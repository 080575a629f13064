"""The RL step's pieces on a tiny hand-built policy: tensors, masks, scales and statistics.

The policy is an embedding and an output matrix run through the trainer's real chunked
log-prob kernel, so each case runs in milliseconds and the expected figures can be computed
by hand from the policy's own log-probs.
"""

from __future__ import annotations

import json

import pytest
import torch
from prl_loss_common import component_losses
from prl_trainer_torch.logprobs import chunked_logprobs
from prl_trainer_torch.rl_step import (
    StepStats,
    _plain,
    merge_stats,
    run_micro_batches,
    to_micro_batch,
    token_logprobs,
)

from prl.config.components import TrainerConfig
from prl.contracts.loss import LossInputs, LossOutputs
from prl.orchestrator.packing import dummy_micro_batch, micro_batch
from prl.types import TrainingSample

CPU = torch.device("cpu")


class TinyPolicy(torch.nn.Module):
    """Token embedding scaled by position, scored by an output matrix (chunks of 4 tokens)."""

    def __init__(self, vocab: int = 12, dim: int = 6, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.emb = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))
        self.head = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))

    def forward(self, input_ids, position_ids, targets, temps, entropy=False, bounds=None):
        h = self.emb[input_ids] * (1 + 0.1 * position_ids[..., None].float())
        return chunked_logprobs(h, self.head, targets, temps, chunk_size=4, entropy=entropy)


def _sample(ids, env="a", adv=1.0, rl=1.0, ce=0.0, ref_kl=0.0, ref=None, lp=None) -> TrainingSample:
    n = len(ids)
    return TrainingSample(
        input_ids=list(ids), loss_mask=[True] * n, advantages=[adv] * n,
        inference_logprobs=list(lp) if lp is not None else [-1.0] * n, temperature=1.0,
        rl_weights=[rl] * n, ce_weights=[ce] * n, ref_kl_weights=[ref_kl] * n, env_name=env,
        ref_logprobs=list(ref) if ref is not None else None,
    )  # fmt: skip


def _ipo():
    return TrainerConfig.model_validate({"loss": {"type": "ipo"}}).loss.build()


def _grads(policy) -> list[torch.Tensor]:
    out = [p.grad.clone() for p in policy.parameters()]
    policy.zero_grad(set_to_none=True)
    return out


def _step(policy, raws, world=1):
    stats = run_micro_batches(policy, _ipo(), [to_micro_batch(r, CPU) for r in raws], world=world)
    return merge_stats([_plain(stats)]), _grads(policy)


def test_micro_batch_tensors_get_model_dtypes_and_the_trainer_device():
    # A wire format may hand over integers (0/1 masks, whole-number floats): the trainer
    # must still index with a bool mask and do float maths.
    raw = micro_batch([_sample([1, 2, 3], ref=[0, 0, 0])])
    raw = {k: [int(x) for x in v] if k not in ("env_names", "trace_ids") else v for k, v in raw.items()}
    mb = to_micro_batch(raw, torch.device("meta"))
    tensors = {k: v for k, v in vars(mb).items() if torch.is_tensor(v)}
    assert {t.device.type for t in tensors.values()} == {"meta"}
    assert mb.loss_mask.dtype == torch.bool
    assert {mb.input_ids.dtype, mb.position_ids.dtype, mb.env_ids.dtype} == {torch.long}
    floats = ("advantages", "inference_logprobs", "temperatures", "rl_weights", "ce_weights", "ref_kl_weights")
    assert {tensors[k].dtype for k in (*floats, "ref_logprobs")} == {torch.float32}


def test_document_starts_leave_every_mask_and_envs_map_to_their_tokens():
    raw = micro_batch([_sample([1, 2, 3], env="b", ce=1.0, ref_kl=1.0, ref=[-1, -2, -3]), _sample([4, 5], env="a")])
    mb = to_micro_batch(raw, CPU)
    assert mb.loss_mask.tolist() == [False, True, True, False, True]
    assert mb.rl_weights.tolist() == [0, 1, 1, 0, 1]
    assert mb.ce_weights.tolist() == [0, 1, 1, 0, 0] and mb.ref_kl_weights.tolist() == [0, 1, 1, 0, 0]
    assert mb.advantages.tolist() == [1.0] * 5  # not a weight: left alone
    assert mb.env_names == ["a", "b"] and mb.env_ids.tolist() == [1, 1, 1, 0, 0]
    assert mb.ref_logprobs.tolist() == [-1, -2, -3, 0, 0]
    assert mb.tokens == 5 and to_micro_batch(dummy_micro_batch(), CPU).tokens == 0
    assert to_micro_batch(micro_batch([_sample([1, 2])]), CPU).ref_logprobs is None


def test_token_statistics_average_per_env_and_over_all_envs():
    # env "a" has no loss tokens (first in order), "b" exactly one, "c" two.
    samples = [_sample([1], env="a"), _sample([1, 2], env="b"), _sample([1, 2, 3], env="c")]
    mb = to_micro_batch(micro_batch(samples), CPU)
    entropy = torch.tensor([9.0, 9.0, 1.0, 9.0, 2.0, 4.0])
    mkl = torch.tensor([9.0, 9.0, 0.3, 9.0, 0.1, 0.2])
    stats = StepStats()
    stats.add_tokens_stats(mb, entropy, mkl)
    out = merge_stats([_plain(stats)])
    assert "entropy/a/mean" not in out
    assert out["entropy/b/mean"] == 1.0 and out["entropy/c/mean"] == 3.0
    assert out["entropy/all/mean"] == pytest.approx(7 / 3)
    assert out["mismatch_kl/b/mean"] == pytest.approx(0.3) and out["mismatch_kl/c/mean"] == pytest.approx(0.15)
    assert out["mismatch_kl/all/mean"] == pytest.approx(0.2)
    # std and max beside the mean: c's entropies are 2 and 4, all's are 1, 2 and 4
    assert out["entropy/c/std"] == pytest.approx(1.0) and out["entropy/c/max"] == 4.0
    assert out["entropy/b/std"] == 0.0 and out["entropy/b/max"] == 1.0
    assert out["entropy/all/std"] == pytest.approx((14 / 9) ** 0.5) and out["entropy/all/max"] == 4.0


def test_merged_metrics_add_sums_over_ranks_before_dividing():
    rank = {
        "loss": {"rl": 1.0, "all": 1.0}, "plugin": {"is_masked": 0.1, "ratio": 0.5},
        "per_env": {"all": [2.0, 0.2, 4.0, 1.0, 0.5], "e": [3.0, 0.5, 1.0, 9.0, 3.0]}, "plugin_weight": 0.5,
        "tokens": 10.0,
        "nonfinite": 1.0,
    }  # fmt: skip
    other = {**rank, "per_env": {"all": [6.0, 0.6, 4.0, 11.0, 2.5]}, "plugin": {"is_masked": 0.3, "ratio": 0.5}}
    out = merge_stats([rank, other])
    assert out["loss/rl"] == 2.0 and out["loss/all"] == 2.0
    # plugin metrics are weighted sums over a total plugin weight of 1 (two ranks of 0.5)
    assert out["is_masked/mean"] == pytest.approx(0.4) and out["loss/ratio"] == 1.0
    assert out["entropy/all/mean"] == 1.0 and out["mismatch_kl/all/mean"] == pytest.approx(0.1)
    assert out["entropy/e/mean"] == 3.0 and out["mismatch_kl/e/mean"] == 0.5  # one token on one rank
    # entropy max is the max over ranks; std comes from the summed squares: E[x^2] = 12/8, mean 1
    assert out["entropy/all/max"] == 2.5 and out["entropy/all/std"] == pytest.approx(0.5**0.5)
    assert out["entropy/e/std"] == 0.0
    assert out["loss/nonfinite_count"] == 2.0 and out["_tokens"] == 20.0


def test_zero_weight_tokens_change_neither_loss_nor_gradient():
    policy = TinyPolicy()
    base = [_sample([1, 2, 3, 4], adv=0.5)]
    with_idle = [*base, _sample([5, 6, 7], adv=3.0, rl=0.0)]  # in the loss mask, rl weight 0
    m1, g1 = _step(policy, [micro_batch(base)])
    m2, g2 = _step(policy, [micro_batch(with_idle)])
    assert m1["loss/rl"] == pytest.approx(m2["loss/rl"]) and m1["loss/rl"] != 0
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b)


def test_ce_and_ref_kl_losses_are_token_means_of_their_own_tokens():
    policy = TinyPolicy()
    ids = [1, 2, 3, 4, 5]
    with torch.no_grad():
        logp, _ = token_logprobs(policy, to_micro_batch(micro_batch([_sample(ids)]), CPU))
    ref = [x - 0.25 for x in logp.tolist()]
    # On-policy (inference log-probs = trainer's), so the ref-KL ratio is 1 and its per-token
    # loss is exactly log p - log p_ref = 0.25.
    samples = [_sample(ids, rl=0.0, ce=2.0, ref_kl=1.0, ref=ref, lp=logp.tolist())]
    metrics, _ = _step(policy, [micro_batch(samples)])
    assert metrics["loss/ce"] == pytest.approx(float(-2.0 * logp[1:].mean()), rel=1e-5)
    assert metrics["loss/ref_kl"] == pytest.approx(0.25, rel=1e-4)
    assert metrics["loss/rl"] == 0.0


def test_split_into_micro_batches_gives_the_same_loss_and_gradient():
    policy = TinyPolicy()
    samples = [_sample([1, 2, 3], adv=1.0), _sample([4, 5, 6, 7], adv=-0.5, ce=1.0), _sample([8, 9], adv=2.0)]
    m1, g1 = _step(policy, [micro_batch(samples)])
    m2, g2 = _step(policy, [micro_batch(samples[:1]), micro_batch(samples[1:])])
    for key in ("loss/rl", "loss/ce", "loss/all", "_tokens"):
        assert m1[key] == pytest.approx(m2[key]), key
    assert m1["loss/all"] == pytest.approx(m1["loss/rl"] + m1["loss/ce"]) and m1["loss/ce"] > 0
    assert m1["_tokens"] == 9
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b)


def test_each_rank_scales_its_gradient_by_world_for_fsdp_averaging():
    policy = TinyPolicy()
    raws = [micro_batch([_sample([1, 2, 3], adv=1.0)])]
    _, g1 = _step(policy, raws, world=1)
    _, g2 = _step(policy, raws, world=2)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(b, 2 * a)


def test_non_finite_micro_batches_are_counted_one_each():
    policy = TinyPolicy()
    good, bad = micro_batch([_sample([1, 2, 3])]), micro_batch([_sample([4, 5, 6], lp=[float("nan")] * 3)])
    metrics, _ = _step(policy, [bad, good, bad])
    assert metrics["loss/nonfinite_count"] == 2.0
    metrics, _ = _step(policy, [good])
    assert metrics["loss/nonfinite_count"] == 0.0


def test_each_token_is_scored_at_its_own_temperature_across_documents():
    policy = TinyPolicy()
    hot, cold = _sample([1, 2, 3, 4]), _sample([5, 6, 7])
    cold.temperature = 0.5
    with torch.no_grad():
        packed, _ = token_logprobs(policy, to_micro_batch(micro_batch([hot, cold]), CPU))
        alone = [token_logprobs(policy, to_micro_batch(micro_batch([s]), CPU))[0] for s in (hot, cold)]
    torch.testing.assert_close(packed, torch.cat(alone))


def test_reported_rl_loss_is_a_weighted_token_mean():
    # Scaling every rl weight by the same factor leaves the normalised loss unchanged, also
    # when the weights sum to less than one.
    policy = TinyPolicy()
    full, _ = _step(policy, [micro_batch([_sample([1, 2], adv=0.5)])])
    quarter, _ = _step(policy, [micro_batch([_sample([1, 2], adv=0.5, rl=0.25)])])
    assert quarter["loss/rl"] == pytest.approx(full["loss/rl"]) and full["loss/rl"] != 0


def _plugin_metrics(policy, raw) -> dict[str, float]:
    """The loss plugin's own metrics on one micro-batch, straight from the plugin."""
    mb = to_micro_batch(raw, CPU)
    with torch.no_grad():
        logp, _ = token_logprobs(policy, mb)
    inputs = LossInputs(logp, mb.inference_logprobs, mb.advantages, mb.loss_mask, mb.rl_weights)
    return {k: float(v) for k, v in component_losses(_ipo(), inputs).metrics.items()}


def test_loss_plugin_metrics_are_weighted_by_rl_tokens_over_micro_batches():
    policy = TinyPolicy()
    # b has exactly one rl token; c trains only the ce component and carries no rl metrics.
    a = micro_batch([_sample([1, 2, 3, 4, 5], adv=0.5, lp=[-3.0] * 5)])
    b = micro_batch([_sample([6, 7], adv=-1.0, lp=[-0.1] * 2)])
    c = micro_batch([_sample([8, 9, 10], rl=0.0, ce=1.0)])
    va, vb = _plugin_metrics(policy, a), _plugin_metrics(policy, b)
    both, _ = _step(policy, [c, a, b, c])
    assert set(va) == {"is_masked", "masked_mismatch_kl", "unmasked_mismatch_kl"}
    assert both["is_masked/mean"] == pytest.approx((4 * va["is_masked"] + vb["is_masked"]) / 5)
    for key in ("masked_mismatch_kl", "unmasked_mismatch_kl"):
        assert both[f"loss/{key}"] == pytest.approx((4 * va[key] + vb[key]) / 5), key


class _VectorMetricLoss:
    """A custom loss reporting one scalar and one per-token metric."""

    def __call__(self, inputs):
        loss = -(inputs.advantages * inputs.trainer_logprobs) * inputs.loss_mask
        # A plain float is not a metric by the contract: skipped, and the rest still reported.
        metrics = {"plain": 0.5, "scalar": torch.tensor(1.5), "per_token": loss.detach()}
        return LossOutputs(loss=loss, metrics=metrics)


@pytest.mark.parametrize("ids", [[1, 2], [1, 2, 3], [1, 2, 3, 4, 5]])
def test_per_token_plugin_metrics_are_averaged_over_rl_tokens(ids):
    policy = TinyPolicy()
    mb = to_micro_batch(micro_batch([_sample(ids)]), CPU)
    with torch.no_grad():
        logp, _ = token_logprobs(policy, mb)
    metrics = merge_stats([_plain(run_micro_batches(policy, _VectorMetricLoss(), [mb], world=1))])
    assert metrics["loss/scalar"] == 1.5 and "loss/plain" not in metrics
    # every token but the first trains (the first token of a document has no prediction)
    assert metrics["loss/per_token"] == pytest.approx(float(-logp[1:].mean()), rel=1e-5)


class _CountingLoss(_VectorMetricLoss):
    def __init__(self):
        self.calls = 0

    def __call__(self, inputs):
        self.calls += 1
        return super().__call__(inputs)


def test_a_micro_batch_without_rl_tokens_never_reaches_the_rl_loss_or_its_metrics():
    policy, loss = TinyPolicy(), _CountingLoss()
    rl = to_micro_batch(micro_batch([_sample([1, 2, 3])]), CPU)
    ce_only = to_micro_batch(micro_batch([_sample([4, 5, 6, 7], rl=0.0, ce=1.0)]), CPU)
    alone = merge_stats([_plain(run_micro_batches(policy, loss, [rl], world=1))])
    assert loss.calls == 1
    both = merge_stats([_plain(run_micro_batches(policy, loss, [rl, ce_only], world=1))])
    assert loss.calls == 2  # the ce-only micro-batch did not call it
    assert both["loss/scalar"] == alone["loss/scalar"] == 1.5
    assert both["loss/per_token"] == pytest.approx(alone["loss/per_token"])
    # the ce component's own metric is not weighted into the loss plugin's metrics either
    assert "loss/nll" not in both


def test_step_stats_sum_over_micro_batches_and_come_back_as_plain_floats():
    mb = to_micro_batch(micro_batch([_sample([1, 2, 3], env="b")]), CPU)
    stats = StepStats()
    stats.add_tokens_stats(mb, torch.tensor([9.0, 0.0, 0.0]), torch.tensor([9.0, 0.5, 0.5]))
    stats.add_tokens_stats(mb, torch.tensor([9.0, 2.0, 4.0]), torch.tensor([9.0, 0.1, 0.3]))
    plain = _plain(stats)
    json.dumps(plain)  # nothing left on the device: the monitors and the rank gather take it as is
    assert plain["per_env"]["b"] == [6.0, pytest.approx(1.4), 4.0, 20.0, 4.0]
    assert all(type(v) is float for v in plain["per_env"]["all"])
    out = merge_stats([plain])
    assert out["entropy/b/mean"] == 1.5 and out["entropy/b/max"] == 4.0
    # an env whose loss tokens all have entropy 0 is still reported (it has tokens)
    zero = StepStats()
    zero.add_tokens_stats(mb, torch.zeros(3), torch.zeros(3))
    assert merge_stats([_plain(zero)])["entropy/b/mean"] == 0.0


class _SeqLensLoss:
    """Records the packed samples' lengths the step hands a loss (per-sample losses split on them)."""

    def __init__(self):
        self.seen = []

    def __call__(self, inputs):
        self.seen.append(inputs.seq_lens)
        return LossOutputs(loss=-(inputs.advantages * inputs.trainer_logprobs) * inputs.loss_mask, metrics={})


def test_the_loss_gets_each_packed_samples_length():
    policy = TinyPolicy()
    mb = to_micro_batch(micro_batch([_sample([1, 2, 3]), _sample([4, 5, 6, 7, 8])]), CPU)
    assert mb.seq_lens == [3, 5]
    loss = _SeqLensLoss()
    run_micro_batches(policy, loss, [mb], world=1)
    assert loss.seen == [[3, 5]]


def test_plugin_metrics_average_over_the_rl_tokens_of_a_mixed_micro_batch():
    policy = TinyPolicy()
    mb = to_micro_batch(micro_batch([_sample([1, 2, 3]), _sample([4, 5, 6, 7], rl=0.0, ce=1.0)]), CPU)
    with torch.no_grad():
        logp, _ = token_logprobs(policy, mb)
    metrics = merge_stats([_plain(run_micro_batches(policy, _VectorMetricLoss(), [mb], world=1))])
    # only the first sample's two predicted tokens are rl tokens; the ce sample's are not
    assert metrics["loss/per_token"] == pytest.approx(float(-logp[1:3].mean()), rel=1e-5)


def test_a_missing_value_in_a_batch_field_is_refused_not_read_as_nan():
    raw = micro_batch([_sample([1, 2, 3])])
    raw["advantages"][1] = None
    with pytest.raises(TypeError, match=r"not a number \(a null\?\); expected torch.float32"):
        to_micro_batch(raw, CPU)
