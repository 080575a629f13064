"""GRPO on a hand-made group: baselines, length penalty, prompt aggregation, token layout."""

import pytest
from prl_algo_grpo import GRPO
from pydantic import ValidationError

from prl.plugins import get_registry
from prl.types import Branch, Trace


def _branch(sampled):
    mask = [bool(s) for s in sampled]
    return Branch(token_ids=list(range(len(mask))), sampled_mask=mask, logprobs=[-1.0] * len(mask))


def _group():
    # trace: (context tokens, sampled tokens, turns, reward)
    # a: 2 ctx, 3 sampled; b: 2 ctx, 1 sampled; c: two branches, 6 ctx, 4 sampled, 2 turns
    return [
        Trace("a", "task", "env", [_branch([0, 0, 1, 1, 1])], reward=1.0),
        Trace("b", "task", "env", [_branch([0, 0, 1])], reward=0.0),
        Trace("c", "task", "env", [_branch([0, 0, 1, 1]), _branch([0, 0, 0, 0, 1, 1])], reward=0.5, turns=2),
    ]


def _score(**cfg):
    group = _group()
    GRPO(GRPO.Config(**cfg)).score_group(group)
    return group


def _advantage(trace):
    branch = trace.branches[0]
    return branch.advantages[branch.sampled_mask.index(True)]


def test_registered_as_grpo_and_default():
    cls = get_registry().get("algorithms", "grpo")
    assert cls is GRPO
    cfg = cls.Config()
    assert (cfg.length_weighted_baseline, cfg.length_penalty, cfg.loss_aggregation) == (False, False, "token")
    assert GRPO(cfg).sampling_source() == "policy"


def test_reward_minus_group_mean_on_sampled_tokens_only():
    a, b, c = _score()
    assert a.branches[0].advantages == [0.0, 0.0, 0.5, 0.5, 0.5]
    assert a.branches[0].rl_weights == [0.0, 0.0, 1.0, 1.0, 1.0]
    assert a.branches[0].ce_weights == [0.0] * 5
    assert a.branches[0].ref_kl_weights == [0.0] * 5
    assert b.branches[0].advantages == [0.0, 0.0, -0.5]
    assert [br.advantages for br in c.branches] == [[0.0] * 4, [0.0] * 6]
    assert c.branches[1].rl_weights == [0.0, 0.0, 0.0, 0.0, 1.0, 1.0]


def test_length_weighted_baseline():
    # L = 3, 1, 4; b = (3*1 + 1*0 + 4*0.5) / 8 = 0.625
    group = _score(length_weighted_baseline=True)
    assert [_advantage(t) for t in group] == pytest.approx([0.375, -0.625, -0.125])


def test_length_penalty_by_hand():
    # mean reward .5; out 3/1/4 (max 4), in 2/2/6 (max 6), turns 1/1/2 (max 2)
    shaped = [
        1.0 - 0.5 * (0.25 * 3 / 4 + 0.1 * 2 / 6 + 0.1 * 1 / 2),
        0.0 - 0.5 * (0.25 * 1 / 4 + 0.1 * 2 / 6 + 0.1 * 1 / 2),
        0.5 - 0.5 * (0.25 + 0.1 + 0.1),
    ]
    mean = sum(shaped) / 3
    group = _score(length_penalty=True)
    assert [_advantage(t) for t in group] == pytest.approx([s - mean for s in shaped])
    assert _advantage(group[0]) == pytest.approx(0.5090278, abs=1e-6)


def test_length_penalty_is_zero_for_a_never_solved_group():
    group = _group()
    for trace in group:
        trace.reward = 0.0
    GRPO(GRPO.Config(length_penalty=True)).score_group(group)
    assert all(a == 0.0 for t in group for br in t.branches for a in br.advantages)


def test_prompt_aggregation_weights_sum_to_one_per_group():
    group = _score(loss_aggregation="prompt")
    weights = [w for t in group for br in t.branches for w in br.rl_weights]
    assert set(weights) == {0.0, 1 / 8}
    assert sum(weights) == pytest.approx(1.0)
    assert _advantage(group[0]) == pytest.approx(0.5)


def test_unknown_aggregation_is_rejected_by_name():
    with pytest.raises(ValidationError, match="loss_aggregation"):
        GRPO.Config(loss_aggregation="sequence")


def test_empty_group_is_a_no_op_and_a_lone_trace_gets_zero():
    GRPO(GRPO.Config()).score_group([])
    lone = _group()[:1]
    GRPO(GRPO.Config()).score_group(lone)
    assert lone[0].branches[0].advantages == [0.0] * 5
    assert lone[0].branches[0].rl_weights == [0.0, 0.0, 1.0, 1.0, 1.0]


def test_importing_the_plugin_does_not_import_torch():
    # the orchestrator scores groups and must run on CPU-only nodes without torch
    import subprocess
    import sys

    code = "import sys, prl_algo_grpo.plugin; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_length_penalty_when_a_group_has_no_context_tokens():
    # every token sampled: the input term has maximum 0 and contributes 0 (no division by 0)
    # out 1/2 (max 2), turns 1/1; mean reward .5
    group = [
        Trace("a", "task", "env", [_branch([1])], reward=1.0),
        Trace("b", "task", "env", [_branch([1, 1])], reward=0.0),
    ]
    GRPO(GRPO.Config(length_penalty=True)).score_group(group)
    shaped = [1.0 - 0.5 * (0.25 * 1 / 2 + 0.1), 0.0 - 0.5 * (0.25 + 0.1)]
    mean = sum(shaped) / 2
    assert [_advantage(t) for t in group] == pytest.approx([s - mean for s in shaped])
    assert _advantage(group[0]) == pytest.approx(0.53125)


def test_length_penalty_with_a_longest_answer_of_one_token():
    # out 1/0 (max 1), in 1/2 (max 2), turns 1/1; b sampled nothing (no advantage to read)
    group = [
        Trace("a", "task", "env", [_branch([0, 1])], reward=1.0),
        Trace("b", "task", "env", [_branch([0, 0])], reward=0.0),
    ]
    GRPO(GRPO.Config(length_penalty=True)).score_group(group)
    # a: 1 − .5 (.25 + .1 · 1/2 + .1) = .8, b: 0 − .5 (0 + .1 + .1) = −.1, mean .35
    assert _advantage(group[0]) == pytest.approx(0.45)
    assert group[1].branches[0].advantages == [0.0, 0.0]


def test_an_advantages_override_of_the_wrong_length_is_refused():
    class Short(GRPO):
        def advantages(self, group, rewards):
            return super().advantages(group, rewards)[:-1]

    with pytest.raises(ValueError, match="zip"):
        Short(GRPO.Config()).score_group(_group())


def test_prompt_aggregation_of_a_group_without_sampled_tokens():
    # every trace stopped before sampling anything: nothing to weigh, and no division by 0
    group = [Trace(t, "task", "env", [_branch([0, 0])], reward=float(i)) for i, t in enumerate("ab")]
    GRPO(GRPO.Config(loss_aggregation="prompt")).score_group(group)
    assert [br.rl_weights for t in group for br in t.branches] == [[0.0, 0.0], [0.0, 0.0]]


def test_length_weighted_baseline_refuses_rewards_that_do_not_match_the_group():
    with pytest.raises(ValueError, match="zip"):
        GRPO(GRPO.Config(length_weighted_baseline=True)).advantages(_group(), [1.0, 0.0])


def test_assign_branch_trains_only_sampled_tokens_at_unit_weight_by_default():
    from prl.advantages import assign_branch

    branch = _branch([False, True, True, False])
    assign_branch(branch, 0.25)
    assert branch.advantages == [0.0, 0.25, 0.25, 0.0]
    assert branch.rl_weights == [0.0, 1.0, 1.0, 0.0]
    assert branch.ce_weights == branch.ref_kl_weights == [0.0] * 4
    assign_branch(branch, -1.0, rl_weight=0.5)
    assert branch.rl_weights == [0.0, 0.5, 0.5, 0.0]
