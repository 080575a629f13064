"""From a scored trace to the samples the trainer gets: each token's advantage and weights
arrive as the algorithm set them, the loss mask covers exactly the tokens with a signal,
and a cut sample keeps every token-aligned list aligned."""

from __future__ import annotations

from prl.orchestrator.samples import is_empty, trace_to_samples
from prl.types import Branch, Trace


def branch(n_prompt: int = 2, n_gen: int = 3, adv: float = 1.0, **fields) -> Branch:
    n = n_prompt + n_gen
    return Branch(
        token_ids=list(range(10, 10 + n)),
        sampled_mask=[False] * n_prompt + [True] * n_gen,
        logprobs=[0.0] * n_prompt + [-0.5] * n_gen,
        advantages=[0.0] * n_prompt + [adv] * n_gen,
        **fields,
    )


def trace(*branches: Branch, **kw) -> Trace:
    return Trace(trace_id="tr-1", task_id="task", env="math", branches=list(branches), **kw)


def test_the_algorithms_weights_and_advantages_reach_the_sample():
    b = branch(adv=-0.75, rl_weights=[0.0, 0.0, 0.5, 0.25, 0.0], temperature=0.6)
    [s] = trace_to_samples(trace(b), seq_len=64).samples
    assert s.advantages == [0.0, 0.0, -0.75, -0.75, -0.75]  # a negative advantage trains too
    assert s.rl_weights == [0.0, 0.0, 0.5, 0.25, 0.0]
    assert s.loss_mask == [False, False, True, True, False]
    assert s.ce_weights == [0.0] * 5 and s.ref_kl_weights == [0.0] * 5
    assert s.inference_logprobs == b.logprobs and s.input_ids == b.token_ids
    assert s.temperature == 0.6 and isinstance(s.temperature, float)
    assert (s.env_name, s.trace_id, s.branch_index) == ("math", "tr-1", 0)


def test_without_advantages_only_other_signals_train():
    b = branch(ref_kl_weights=[0.0, 0.0, 1.0, 1.0, 0.0])
    b.advantages = None
    [s] = trace_to_samples(trace(b), seq_len=64).samples
    assert s.advantages == [0.0] * 5 and s.rl_weights == [0.0] * 5
    assert s.loss_mask == [False, False, True, True, False]


def test_min_abs_advantage_compares_magnitudes_per_token():
    b = branch(n_gen=4)
    b.advantages = [0.0, 0.0, -0.3, 0.3, 0.1, -0.1]
    [s] = trace_to_samples(trace(b), seq_len=64, min_abs_advantage=0.2).samples
    assert s.rl_weights == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert s.loss_mask == [False, False, True, True, False, False]
    [exact] = trace_to_samples(trace(branch(adv=-0.1)), seq_len=64).samples  # m = 0: A != 0
    assert exact.rl_weights == [0.0, 0.0, 1.0, 1.0, 1.0]
    one = branch(n_gen=2)
    one.advantages = [0.0, 0.0, 0.5, 1.5]
    [s] = trace_to_samples(trace(one), seq_len=64, min_abs_advantage=1.0).samples
    assert s.rl_weights == [0.0, 0.0, 0.0, 1.0]


def test_a_mask_over_rl_ce_and_kl_tokens():
    b = branch(adv=0.0, ce_weights=[0.0, 0.0, 0.0, 0.0, 2.0], ref_kl_weights=[0.0, 0.0, 0.0, 1.0, 0.0])
    b.advantages = [0.0, 0.0, 1.0, 0.0, 0.0]
    [s] = trace_to_samples(trace(b), seq_len=64).samples
    assert s.loss_mask == [False, False, True, True, True]
    assert s.rl_weights == [0.0, 0.0, 1.0, 0.0, 0.0]


def test_a_cut_sample_keeps_its_lists_aligned():
    masks = [[], [], [10, 11], [12], [13, 14]]
    b = branch(ref_logprobs=[-1.0] * 5, sampling_mask=masks, sampling_mask_logprobs=[[-0.1] * len(m) for m in masks])
    out = trace_to_samples(trace(b), seq_len=4)
    [s] = out.samples
    assert out.overlong == 1
    for name in ("input_ids", "loss_mask", "advantages", "inference_logprobs", "rl_weights", "ce_weights",
                 "ref_kl_weights", "ref_logprobs", "sampling_mask", "sampling_mask_logprobs"):  # fmt: skip
        assert len(getattr(s, name)) == 4, name
    assert s.sampling_mask == masks[:4] and s.input_ids == [10, 11, 12, 13]
    assert trace_to_samples(trace(branch(), branch()), seq_len=4).overlong == 2
    fits = trace_to_samples(trace(branch()), seq_len=5)
    assert fits.overlong == 0 and len(fits.samples[0].input_ids) == 5


def test_every_branch_with_a_signal_becomes_a_sample_with_its_index():
    useless = branch(adv=0.0)
    out = trace_to_samples(trace(branch(), Branch([], [], []), useless, branch(adv=2.0)), seq_len=64)
    assert [s.branch_index for s in out.samples] == [0, 3]
    assert out.samples[1].advantages[-1] == 2.0 and out.useful


def test_a_trace_without_sampled_tokens_is_empty():
    assert is_empty(trace(branch(n_gen=0), Branch([1], [False], [0.0])))
    assert not is_empty(trace(branch(n_gen=0), branch(n_gen=1)))
    assert not is_empty(trace(branch(n_gen=0), error="boom"))  # failed, not empty
