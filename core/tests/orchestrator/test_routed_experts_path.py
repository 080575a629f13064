"""Routed experts (routing replay) travel with their tokens: server choice → generation →
branch → env wire → training sample → micro-batch, aligned with the token ids."""

from __future__ import annotations

import pytest

from prl.client import choice_generation
from prl.envs.wire import trace_from_dict, trace_to_dict
from prl.orchestrator.packing import micro_batch
from prl.orchestrator.samples import trace_to_samples
from prl.tasks.branches import add_observation, add_sampled, check_branch, start_branch
from prl.types import Generation, Trace


def _routed(ids, routes):
    return Generation(ids, [-0.5] * len(ids), "stop", routed_experts=routes)


def test_the_client_reads_routed_experts_from_a_choice():
    choice = {
        "token_ids": [7, 8],
        "logprobs": {"content": [{"token_id": 7, "logprob": -0.1}, {"token_id": 8, "logprob": -0.2}]},
        "routed_experts": [[0, 1, 2, 3], [3, 2, 1, 0]],
    }
    assert choice_generation({}, choice).routed_experts == [[0, 1, 2, 3], [3, 2, 1, 0]]
    del choice["routed_experts"]
    assert choice_generation({}, choice).routed_experts is None


def test_a_branch_keeps_one_route_list_per_token():
    branch = start_branch([1, 2])
    add_sampled(branch, Generation([3], [-0.1], "stop"))  # no routes returned: nothing kept yet
    assert branch.routed_experts is None
    add_observation(branch, [4])
    add_sampled(branch, _routed([5, 6], [[1, 2], [3, 0]]))
    add_observation(branch, [7])
    add_sampled(branch, Generation([8], [-0.1], "stop"))  # a later turn without routes
    assert branch.routed_experts == [[], [], [], [], [1, 2], [3, 0], [], []]
    check_branch(branch)
    branch.routed_experts.pop()
    with pytest.raises(ValueError, match="8 token ids but routed_experts has 7"):
        check_branch(branch)
    with pytest.raises(ValueError, match="2 tokens but 1 routed_experts entries"):
        add_sampled(branch, _routed([8, 9], [[1, 2]]))


def test_routes_reach_the_micro_batch_aligned_and_cut_with_the_sample():
    branch = start_branch([1, 2])
    add_sampled(branch, _routed([3, 4, 5], [[0, 1], [2, 3], [1, 3]]))
    branch.advantages = [1.0] * 5
    trace = trace_from_dict(trace_to_dict(Trace("t", "task", "env", [branch])))  # over the env wire
    plain = start_branch([1])
    add_sampled(plain, Generation([2], [-0.4], "stop"))
    plain.advantages = [1.0, 1.0]
    samples = trace_to_samples(trace, seq_len=4).samples + trace_to_samples(Trace("u", "t", "env", [plain]), 4).samples
    assert samples[0].routed_experts == [[], [], [0, 1], [2, 3]]  # cut to seq_len with the tokens
    assert samples[1].routed_experts is None
    mb = micro_batch(samples)
    assert mb["routed_experts"] == [[], [], [0, 1], [2, 3], [], []]
    assert len(mb["routed_experts"]) == len(mb["input_ids"])
    assert "routed_experts" not in micro_batch(samples[1:])
