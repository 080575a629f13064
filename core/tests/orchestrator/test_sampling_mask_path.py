"""Sampling masks travel with their tokens: generation → branch → training sample → micro-batch."""

from __future__ import annotations

import pytest

from prl.envs.wire import trace_from_dict, trace_to_dict
from prl.orchestrator.packing import micro_batch
from prl.orchestrator.samples import trace_to_samples
from prl.tasks.branches import add_observation, add_sampled, check_branch, start_branch
from prl.types import Generation, Trace


def _truncated(ids, masks, lps):
    return Generation(ids, [-0.5] * len(ids), "stop", sampling_mask=masks, sampling_mask_logprobs=lps)


def test_a_branch_keeps_one_mask_per_token():
    branch = start_branch([1, 2])
    add_sampled(branch, Generation([3], [-0.1], "stop"))  # untruncated: nothing recorded yet
    assert branch.sampling_mask is None
    add_observation(branch, [4])
    add_sampled(branch, _truncated([5, 6], [[5, 9], [6]], [[-0.2, -1.9], [-0.01]]))
    add_observation(branch, [7])
    assert branch.sampling_mask == [[], [], [], [], [5, 9], [6], []]
    assert branch.sampling_mask_logprobs == [[], [], [], [], [-0.2, -1.9], [-0.01], []]
    check_branch(branch)
    with pytest.raises(ValueError, match="2 tokens but 1 sampling masks"):
        add_sampled(branch, _truncated([8, 9], [[8]], [[-0.3]]))


def test_masks_reach_the_micro_batch_aligned_and_cut_with_the_sample():
    branch = start_branch([1, 2])
    add_sampled(branch, _truncated([3, 4, 5], [[3], [4, 0], [5]], [[-0.1], [-0.2, -2.0], [-0.3]]))
    branch.advantages = [1.0] * 5
    trace = trace_from_dict(trace_to_dict(Trace("t", "task", "env", [branch])))  # over the env wire
    plain = start_branch([1])
    add_sampled(plain, Generation([2], [-0.4], "stop"))
    plain.advantages = [1.0, 1.0]
    samples = trace_to_samples(trace, seq_len=4).samples + trace_to_samples(Trace("u", "t", "env", [plain]), 4).samples
    assert samples[0].sampling_mask == [[], [], [3], [4, 0]]  # cut to seq_len with the tokens
    mb = micro_batch(samples)
    assert mb["sampling_mask"] == [[], [], [3], [4, 0], [], []]
    assert mb["sampling_mask_logprobs"] == [[], [], [-0.1], [-0.2, -2.0], [], []]
    assert len(mb["sampling_mask"]) == len(mb["input_ids"])
    assert "sampling_mask" not in micro_batch(samples[1:])
