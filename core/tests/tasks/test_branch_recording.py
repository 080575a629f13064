"""What a branch records when a taskset builds it by hand: defaults the trainer relies on
(temperature 1, agent 'default', environment turns as 'user'), sampling masks paired with
their logprobs, and errors that name each misaligned list."""

from __future__ import annotations

import pytest

from prl.tasks.branches import add_observation, add_sampled, check_branch, copy_branch, start_branch
from prl.types import Generation


def test_defaults_of_a_hand_built_branch():
    branch = start_branch([1, 2], roles=["user", "user"])
    assert branch.agent == "default" and branch.temperature == 1.0
    add_observation(branch, [3])
    assert branch.roles == ["user", "user", "user"] and branch.sampled_mask == [False] * 3
    copied = copy_branch([1], [False], [0.0])
    assert copied.agent == "default" and copied.temperature == 1.0 and copied.roles is None


def test_a_copied_branch_keeps_roles_and_temperature():
    copied = copy_branch((4, 5), (0, 1), (0.0, -0.5), roles=("user", "assistant"), temperature=0.7)
    assert copied.roles == ["user", "assistant"] and copied.temperature == 0.7


def test_mask_logprobs_without_a_mask_are_not_recorded():
    branch = start_branch([1])
    add_sampled(branch, Generation([5], [-0.5], "stop", sampling_mask=[[5, 6]], sampling_mask_logprobs=[[-0.5, -1.0]]))
    add_sampled(branch, Generation([7], [-0.1], "stop", sampling_mask=None, sampling_mask_logprobs=[[-0.1]]))
    assert branch.sampling_mask == [[], [5, 6], []]
    assert branch.sampling_mask_logprobs == [[], [-0.5, -1.0], []]


def test_a_misaligned_branch_names_each_wrong_list():
    branch = copy_branch([1, 2], [False, True], [0.0, -1.0], roles=["user", "assistant"])
    branch.sampling_mask = [[], [2]]
    check_branch(branch)  # aligned, roles and masks included
    branch.sampled_mask = [False]
    branch.roles = ["user"]
    branch.sampling_mask = []
    with pytest.raises(ValueError, match="2 token ids but sampled_mask has 1, roles has 1, sampling_mask has 0$"):
        check_branch(branch)
