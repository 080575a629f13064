"""The engine's sampler without a model: which tokens each row may draw, how often, and the
logprobs it reports for them (the numbers the trainer's importance ratios start from).

Distribution checks draw one token from each of many identical rows with a fixed seed, so
they are deterministic; 40 000 draws put a frequency within 0.01 of its probability by
more than four standard deviations.
"""

from __future__ import annotations

import math

import pytest
import torch
from prl_inference_torch.sampling import RowSampling, prompt_logprobs, sample

# probabilities exact in binary, so cumulative masses hit top_p boundaries exactly
DYADIC = [0.5, 0.25, 0.125, 0.0625, 0.0625]
DRAWS = 40_000


def row(temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, seed: int | None = None, **kw) -> RowSampling:
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    return RowSampling(temperature, top_p, top_k, generator, **kw)


def frequencies(logits: list[float], r: RowSampling, draws: int = DRAWS) -> list[float]:
    batch = torch.tensor([logits]).expand(draws, -1)
    tokens = sample(batch, [r] * draws, torch.Generator().manual_seed(0)).tokens
    return (torch.bincount(tokens, minlength=len(logits)).float() / draws).tolist()


def kept(logits: list[float], r: RowSampling) -> list[int] | None:
    return sample(torch.tensor([logits]), [r], torch.Generator().manual_seed(0)).kept[0]


def test_temperature_scales_the_sampled_distribution_and_its_logprobs():
    z = [1.0, 0.5, 0.0, -1.0]
    want = torch.softmax(torch.tensor(z) / 0.7, -1).tolist()
    assert frequencies(z, row(0.7)) == pytest.approx(want, abs=0.01)
    s = sample(torch.tensor([z]), [row(0.7)], torch.Generator().manual_seed(1))
    assert s.logprobs[0].item() == pytest.approx(math.log(want[s.tokens[0]]), abs=1e-6)


def test_greedy_takes_the_argmax_with_its_untempered_logprob():
    z = torch.tensor([[0.0, 3.0, 1.0], [2.0, -1.0, 0.0]])
    s = sample(z, [row(0.0), row(0.0)], torch.Generator().manual_seed(0))
    assert s.tokens.tolist() == [1, 0]
    want = torch.log_softmax(z, -1)
    assert s.logprobs.tolist() == pytest.approx([want[0, 1].item(), want[1, 0].item()], abs=1e-6)
    assert s.ranks.tolist() == [1, 1]


def test_top_k_keeps_exactly_the_k_most_likely_and_renormalises():
    z = [0.0, 2.0, 1.0, -1.0, 1.5]
    assert kept(z, row(top_k=2)) == [1, 4]
    p = torch.softmax(torch.tensor(z), -1)
    top = p[1] + p[4]
    want = [0.0, (p[1] / top).item(), 0.0, 0.0, (p[4] / top).item()]
    assert frequencies(z, row(top_k=2)) == pytest.approx(want, abs=0.01)


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    z = [math.log(p) for p in DYADIC]
    assert kept(z, row(top_p=0.74)) == [0, 1]
    # the first two hold exactly 0.75: the third is not needed to reach it
    assert kept(z, row(top_p=0.75)) == [0, 1]
    assert kept(z, row(top_p=0.76)) == [0, 1, 2]
    assert kept(z, row(top_p=0.0)) == [0]  # the most likely token always stays
    assert frequencies(z, row(top_p=0.75)) == pytest.approx([2 / 3, 1 / 3, 0, 0, 0], abs=0.01)


def test_top_p_applies_after_top_k_and_the_cap_keeps_the_nucleus_head():
    z = [math.log(p) for p in DYADIC]
    # within the top 3 (mass 0.875) the first two hold 0.75 / 0.875 = 0.857 of it
    assert kept(z, row(top_k=3, top_p=0.8)) == [0, 1]
    assert kept(z, row(top_k=3, top_p=0.9)) == [0, 1, 2]
    assert kept(z, row(top_p=0.9, cap=2)) == [0, 1]
    assert kept(z, row(top_p=0.9, cap=99)) == [0, 1, 2, 3]


def test_each_row_keeps_its_own_settings_in_a_mixed_batch():
    z = torch.tensor([[math.log(p) for p in DYADIC]] * 5)
    rows = [row(top_k=1), row(), row(top_k=3), row(top_p=0.6, cap=1), row(top_p=0.8)]
    s = sample(z, rows, torch.Generator().manual_seed(0))
    assert s.kept == [[0], None, [0, 1, 2], [0], [0, 1, 2]]
    assert s.kept_logprobs[2] == pytest.approx([math.log(p) for p in DYADIC[:3]], abs=1e-6)
    assert s.kept_logprobs[1] is None


def test_kept_ids_are_reported_only_where_sampling_was_truncated():
    z = torch.tensor([[math.log(p) for p in DYADIC]] * 3)
    rows = [row(0.0, top_k=2), row(top_k=2, masks=False), row(top_k=2)]
    s = sample(z, rows, torch.Generator().manual_seed(0))
    assert s.kept == [None, None, [0, 1]]
    assert s.kept_logprobs == [None, None, pytest.approx([math.log(0.5), math.log(0.25)], abs=1e-6)]
    plain = sample(z, [row(), row(), row()], torch.Generator().manual_seed(0))
    assert plain.kept is None and plain.kept_logprobs is None


def test_kept_logprobs_are_tempered_but_not_renormalised():
    z = [1.0, 0.0, -1.0]
    s = sample(torch.tensor([z]), [row(2.0, top_k=2)], torch.Generator().manual_seed(0))
    want = torch.log_softmax(torch.tensor(z) / 2.0, -1)[:2].tolist()
    assert s.kept_logprobs[0] == pytest.approx(want, abs=1e-6)


def test_a_seeded_row_draws_the_same_tokens_whatever_else_is_in_the_batch():
    z = torch.zeros(1, 1000)
    alone = [sample(z, [row(seed=s)], torch.Generator().manual_seed(1)).tokens.item() for s in range(8)]
    batch = torch.zeros(9, 1000)
    rows = [row()] + [row(seed=s) for s in range(8)]
    mixed = sample(batch, rows, torch.Generator().manual_seed(2)).tokens[1:].tolist()
    assert mixed == alone
    assert len(set(alone)) > 1  # the seeds do differ


def test_ranks_and_top_alternatives():
    z = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    s = sample(z, [row(top_k=4)], torch.Generator().manual_seed(0), top_n=2)
    logp = torch.log_softmax(z, -1)[0]
    assert s.ranks.item() == 1 + int((logp > logp[s.tokens.item()]).sum())
    assert s.top_ids.tolist() == [[1, 3]]
    assert s.top_logprobs[0].tolist() == pytest.approx([logp[1].item(), logp[3].item()], abs=1e-6)
    worst = sample(torch.tensor([[0.0, -50.0]]), [row()], torch.Generator().manual_seed(0), top_n=5)
    assert worst.top_ids.tolist() == [[0, 1]]  # no more alternatives than the vocabulary
    assert sample(z, [row()], torch.Generator().manual_seed(0)).top_ids is None


def test_the_rank_counts_the_tokens_more_likely_than_the_drawn_one():
    z = torch.tensor([[0.0, 3.0, 1.0, 2.0]]).expand(200, -1)
    s = sample(z, [row(5.0)] * 200, torch.Generator().manual_seed(0))
    order = {1: 1, 3: 2, 2: 3, 0: 4}
    assert s.ranks.tolist() == [order[t] for t in s.tokens.tolist()]


def test_half_precision_logits_give_float32_logprobs():
    z = torch.tensor([[0.1, 0.2, 0.3]], dtype=torch.bfloat16)
    s = sample(z, [row(top_k=2)], torch.Generator().manual_seed(0))
    assert s.logprobs.dtype == torch.float32


def test_prompt_logprobs_score_each_token_given_the_ones_before():
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    ids = torch.tensor([2, 0, 2])
    out = prompt_logprobs(logits, ids, top_n=2)
    logp = torch.log_softmax(logits, -1)
    assert out[0] is None
    # logits[0] scores ids[1] = 0, the least likely of three; the top 2 add tokens 1 and 2
    assert out[1][0] == pytest.approx((logp[0, 0].item(), 3))
    assert out[1][1] == pytest.approx((logp[0, 1].item(), 1))
    assert out[1][2] == pytest.approx((logp[0, 2].item(), 2))
    # ids[2] = 2 given logits[1]: rank 2; the top 2 add token 0 (rank 1) and keep 2's own entry
    assert out[2] == {2: pytest.approx((logp[1, 2].item(), 2)), 0: pytest.approx((logp[1, 0].item(), 1))}
    assert prompt_logprobs(logits, ids, top_n=0)[2] == {2: pytest.approx((logp[1, 2].item(), 2))}


def test_the_sampler_works_on_the_logits_device_not_the_default_one():
    """On a GPU server the logits live on cuda while torch's default device is the CPU; here
    the default device is 'meta', so a tensor the sampler makes without naming the logits'
    device would not mix with them."""
    z = torch.tensor([[math.log(p) for p in DYADIC]] * 4)
    rows = [row(0.0), row(top_p=0.8), row(0.5, top_k=2, seed=1), row(top_p=0.9, cap=2)]
    with torch.device("meta"):
        s = sample(z, rows, torch.Generator().manual_seed(0), top_n=2)
    assert s.tokens.device.type == "cpu"
    assert s.kept == [None, [0, 1, 2], [0, 1], [0, 1]]


def test_the_engine_generator_alone_decides_unseeded_draws():
    z = torch.zeros(16, 1000)
    draws = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)  # other code drawing from torch's global generator
        draws.append(sample(z, [row()] * 16, torch.Generator().manual_seed(5)).tokens.tolist())
    assert draws[0] == draws[1]


def test_a_token_of_negligible_probability_stays_in_a_top_k_mask():
    # 1 + e^-50 is 1.0 in float32: a top_p of 1.0 applied anyway would cut tokens 1 and 2
    assert kept([0.0, -50.0, -51.0, -60.0], row(top_k=3)) == [0, 1, 2]


def test_one_alternative_is_one_alternative():
    z = torch.tensor([[0.0, 3.0, 1.0]])
    assert sample(z, [row()], torch.Generator().manual_seed(0), top_n=1).top_ids.tolist() == [[1]]
    out = prompt_logprobs(torch.tensor([[0.0, 3.0, 1.0], [0.0, 0.0, 0.0]]), torch.tensor([0, 2]), top_n=1)
    assert sorted(out[1]) == [1, 2] and out[1][1][1] == 1 and out[1][2][1] == 2
