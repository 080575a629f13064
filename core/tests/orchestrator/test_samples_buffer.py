"""Trace to sample conversion and the batch accounting of the group buffer."""

from __future__ import annotations

import pytest

from prl.orchestrator.buffer import FinishedGroup, GroupBuffer
from prl.orchestrator.samples import MalformedTrace, trace_to_samples
from prl.types import Branch, Trace


def _trace(adv: float, n_prompt: int = 2, n_gen: int = 3, **kw) -> Trace:
    b = Branch(
        token_ids=list(range(n_prompt + n_gen)),
        sampled_mask=[False] * n_prompt + [True] * n_gen,
        logprobs=[0.0] * n_prompt + [-0.1] * n_gen,
        advantages=[0.0] * n_prompt + [adv] * n_gen,
    )
    return Trace(trace_id=kw.pop("tid", "t"), task_id="x", env="e", branches=[b], **kw)


def test_sampled_tokens_train_with_their_advantage():
    [s] = trace_to_samples(_trace(0.5), seq_len=64).samples
    assert s.loss_mask == [False, False, True, True, True]
    assert s.rl_weights == [0.0, 0.0, 1.0, 1.0, 1.0] and s.advantages[-1] == 0.5


def test_zero_advantage_sample_is_useless_and_min_abs_advantage_prunes():
    assert not trace_to_samples(_trace(0.0), seq_len=64).useful
    assert not trace_to_samples(_trace(0.2), seq_len=64, min_abs_advantage=0.2).useful
    assert trace_to_samples(_trace(0.21), seq_len=64, min_abs_advantage=0.2).useful


def test_ce_weights_keep_a_zero_advantage_sample():
    t = _trace(0.0)
    t.branches[0].ce_weights = [0.0, 0.1, 0.0, 0.0, 0.0]
    [s] = trace_to_samples(t, seq_len=64).samples
    assert s.loss_mask == [False, True, False, False, False]


def test_errored_trace_gives_no_samples_and_overlong_is_cut():
    assert not trace_to_samples(_trace(1.0, error="boom"), seq_len=64).useful
    out = trace_to_samples(_trace(1.0, n_prompt=4, n_gen=10), seq_len=8)
    assert out.overlong == 1 and len(out.samples[0].input_ids) == 8 and len(out.samples[0].rl_weights) == 8


def test_mismatched_lengths_are_reported():
    t = _trace(1.0)
    t.branches[0].logprobs = [0.0]
    with pytest.raises(MalformedTrace, match="logprobs has 1 entries for 5 tokens"):
        trace_to_samples(t, seq_len=64)


def _group(version: int, advs: list[float]) -> FinishedGroup:
    traces = [trace_to_samples(_trace(a, tid=f"{version}-{i}"), 64) for i, a in enumerate(advs)]
    return FinishedGroup(version, traces)


def test_constant_batch_counts_only_useful_traces_and_splits_groups():
    buf = GroupBuffer(batch_size=4, constant=True, max_off_policy_steps=8)
    buf.add(_group(0, [0.0, 0.0, 0.0]))  # all equal rewards: filtered at once
    buf.add(_group(0, [1.0, -1.0, 0.5]))
    assert not buf.ready(1)
    buf.add(_group(0, [1.0, -1.0, 0.0]))
    assert buf.ready(1)
    batch = buf.take(1)
    assert len(batch.traces) == 4 and batch.pruned == 0
    assert buf.count == 1 and buf.groups[0].traces[0].trace.trace_id == "0-1"  # remainder first
    assert buf.pop_counters()["batch/filtered_traces"] == 4


def test_variable_batch_takes_then_prunes():
    buf = GroupBuffer(batch_size=4, constant=False, max_off_policy_steps=8)
    buf.add(_group(0, [0.0, 0.0]))
    buf.add(_group(0, [1.0, -1.0]))
    batch = buf.take(1)
    assert len(batch.traces) == 2 and batch.pruned == 2


def test_off_policy_window_drops_old_groups():
    buf = GroupBuffer(batch_size=2, constant=True, max_off_policy_steps=2)
    buf.add(_group(0, [1.0, -1.0]))
    buf.add(_group(3, [1.0, -1.0]))
    assert buf.ready(4)  # batch 4 trains at version 3: lag 3 > 2 drops version 0
    batch = buf.take(4)
    assert [t.trace.trace_id for t in batch.traces] == ["3-0", "3-1"] and batch.lags == [0, 0]
    counters = buf.pop_counters()
    assert counters["off_policy/dropped_groups"] == 1 and counters["off_policy/dropped_traces"] == 2


def test_every_stale_group_is_dropped_counted_and_uncounted():
    buf = GroupBuffer(batch_size=2, constant=True, max_off_policy_steps=1)
    buf.add(_group(0, [1.0, -1.0]))
    buf.add(_group(1, [1.0, -1.0, 0.5]))
    buf.add(_group(3, [1.0]))
    assert not buf.ready(4)  # batch 4 accepts versions >= 2: both older groups go
    assert buf.count == 1
    counters = buf.pop_counters()
    assert counters["off_policy/dropped_groups"] == 2 and counters["off_policy/dropped_traces"] == 5
    # Counters are per step: the next report starts from zero.
    assert set(buf.pop_counters().values()) == {0.0}


def test_a_split_group_keeps_its_version_for_the_next_batch():
    buf = GroupBuffer(batch_size=2, constant=False, max_off_policy_steps=1)
    buf.add(_group(0, [1.0, -1.0, 0.5]))
    assert buf.take(1).lags == [0, 0]
    assert buf.groups[0].dispatch_version == 0
    buf.add(_group(1, [1.0]))
    batch = buf.take(2)  # the remainder (version 0) is one step off-policy for batch 2
    assert batch.lags == [1, 0]
