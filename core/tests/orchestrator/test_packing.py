"""Packing: first-fit decreasing, rank balance, position ids, dummies."""

from __future__ import annotations

import random

import pytest

from prl.orchestrator.packing import balance, bin_cost, first_fit_decreasing, pack
from prl.types import TrainingSample


def _sample(n: int, env: str = "e", tid: str = "") -> TrainingSample:
    return TrainingSample(
        input_ids=list(range(1, n + 1)), loss_mask=[True] * n, advantages=[0.5] * n,
        inference_logprobs=[-1.0] * n, temperature=0.7, rl_weights=[1.0] * n, ce_weights=[0.0] * n,
        ref_kl_weights=[0.0] * n, env_name=env, trace_id=tid,
    )  # fmt: skip


def test_ffd_known_packing():
    # FFD on capacity 10: 7 opens, 6 opens, 5 opens, 4 joins 6, 3 joins 7, 2 joins 5.
    bins = first_fit_decreasing([2, 5, 4, 7, 6, 3], 10)
    sizes = sorted(sorted([2, 5, 4, 7, 6, 3][i] for i in b) for b in bins)
    assert sizes == [[2, 5], [3, 7], [4, 6]]


def test_ffd_respects_capacity_and_keeps_every_sample():
    rng = random.Random(0)
    lengths = [rng.randint(1, 100) for _ in range(300)]
    bins = first_fit_decreasing(lengths, 128)
    assert sorted(i for b in bins for i in b) == list(range(300))
    assert all(sum(lengths[i] for i in b) <= 128 for b in bins)
    assert len(bins) <= 11 / 9 * (sum(lengths) / 128) + 2


def test_overlong_sample_is_an_error():
    with pytest.raises(ValueError, match="exceeds seq_len 8"):
        first_fit_decreasing([9], 8)


def test_balance_equal_counts_and_close_costs():
    rng = random.Random(1)
    costs = [rng.uniform(10, 100) for _ in range(37)]
    ranks = balance(costs, 4)
    assert sorted(len(r) for r in ranks) == [9, 9, 9, 10]
    totals = [sum(costs[i] for i in r) for r in ranks]
    assert max(totals) - min(totals) <= max(costs)


def test_position_ids_reset_per_document_and_fields_align():
    samples = [_sample(5, "a", "x"), _sample(3, "b", "y"), _sample(4, "a", "z")]
    [[mb]] = pack(samples, seq_len=16, ranks=1)
    assert mb["seq_lens"] == [5, 4, 3]  # longest first
    assert mb["position_ids"] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 1, 2]
    assert mb["env_names"] == ["a", "a", "b"] and mb["trace_ids"] == ["x", "z", "y"]
    assert mb["branch_indices"] == [0, 0, 0]
    assert mb["temperatures"] == [0.7] * 12 and len(mb["rl_weights"]) == 12
    assert "ref_logprobs" not in mb


def test_ref_logprobs_present_when_any_sample_has_them():
    with_ref = _sample(3)
    with_ref.ref_logprobs = [-2.0] * 3
    [[mb]] = pack([with_ref, _sample(2)], seq_len=8, ranks=1)
    assert mb["ref_logprobs"] == [-2.0, -2.0, -2.0, 0.0, 0.0]


def test_empty_ranks_get_dummy_batches():
    ranks = pack([_sample(6)], seq_len=8, ranks=3)
    assert [len(r) for r in ranks] == [1, 1, 1]
    real = [r for r in ranks if any(r[0]["loss_mask"])]
    dummies = [r for r in ranks if not any(r[0]["loss_mask"])]
    assert len(real) == 1 and len(dummies) == 2
    assert dummies[0][0]["input_ids"] == [0] and dummies[0][0]["rl_weights"] == [0.0]


def test_rank_costs_are_balanced_on_a_realistic_batch():
    rng = random.Random(2)
    samples = [_sample(rng.randint(20, 500), tid="s") for _ in range(128)]
    ranks = pack(samples, seq_len=1024, ranks=4)
    assert len({len(r) for r in ranks}) == 1
    costs = [sum(bin_cost(mb["seq_lens"], 1024) for mb in r) for r in ranks]
    assert max(costs) / min(costs) < 1.2
    real = [n for r in ranks for mb in r for n, t in zip(mb["seq_lens"], mb["trace_ids"], strict=False) if t]
    assert sorted(real) == sorted(len(s.input_ids) for s in samples)


def test_bin_cost_counts_tokens_and_attention_per_document():
    # 6 tokens of dense work plus (4² + 2²) / 8 of attention within each document.
    assert bin_cost([4, 2], 8) == 6 + 20 / 8
    assert bin_cost([6], 8) > bin_cost([3, 3], 8)  # one long document attends more


def test_balance_never_gives_a_rank_more_than_its_share():
    # Greedy-by-cost alone would put all three cheap bins beside each other on rank 1.
    ranks = balance([10.0, 1.0, 1.0, 1.0], 2)
    assert sorted(len(r) for r in ranks) == [2, 2]
    assert balance([], 3) == [[], [], []]


def test_no_samples_still_gives_every_rank_one_dummy():
    ranks = pack([], seq_len=8, ranks=2)
    assert [len(r) for r in ranks] == [1, 1] and not any(r[0]["loss_mask"][0] for r in ranks)
