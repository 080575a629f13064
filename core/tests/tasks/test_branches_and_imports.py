"""prl.tasks.branches keeps token-aligned lists aligned; the kit never imports torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from prl.tasks.branches import add_observation, add_sampled, check_branch, copy_branch, start_branch
from prl.types import Generation


def test_hand_driven_branch_without_a_renderer():
    branch = start_branch([1, 2, 3], temperature=0.5, agent="solver/0")
    add_sampled(branch, Generation([7, 8], [-0.1, -0.2], "stop"))
    add_observation(branch, [4])
    add_sampled(branch, Generation([9], [-0.3], "length"))
    assert branch.token_ids == [1, 2, 3, 7, 8, 4, 9]
    assert branch.sampled_mask == [False, False, False, True, True, False, True]
    assert branch.logprobs == [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, -0.3]
    assert branch.roles is None and branch.agent == "solver/0" and branch.temperature == 0.5
    check_branch(branch)


def test_roles_follow_the_tokens_when_kept():
    branch = start_branch([1, 2], roles=["user", "template"])
    add_sampled(branch, Generation([5], [-1.0], "stop"))
    add_observation(branch, [6, 7], role="tool")
    assert branch.roles == ["user", "template", "assistant", "tool", "tool"]


def test_misaligned_input_is_refused():
    with pytest.raises(ValueError, match="2 tokens but 1 logprobs"):
        add_sampled(start_branch([1]), Generation([5, 6], [-1.0], "stop"))
    with pytest.raises(ValueError, match="roles"):
        start_branch([1, 2], roles=["user"])
    with pytest.raises(ValueError, match="3 token ids but logprobs has 2"):
        copy_branch([1, 2, 3], [False, True, True], [0.0, -1.0], agent="a")
    copied = copy_branch((1, 2), (0, 1), (0, -1), agent="a", temperature=0.9)
    assert copied.sampled_mask == [False, True] and copied.logprobs == [0.0, -1.0] and copied.agent == "a"


def test_the_kit_imports_no_heavy_dependency():
    code = (
        "import sys, prl.tasks, prl.tasks.testing\n"
        "print('HEAVY', [m for m in ('torch', 'transformers', 'vllm', 'verifiers') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout
