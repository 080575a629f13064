"""rae: A = r_agent - b_agent with b_agent an EMA (0.95) per agent, updated after scoring."""

import pytest
from prl_algo_rae import RAE
from pydantic import ValidationError

from prl.plugins import get_registry
from prl.types import Branch, Trace


def _branch(agent, sampled=(0, 1, 1)):
    mask = [bool(s) for s in sampled]
    return Branch(list(range(len(mask))), mask, [-1.0] * len(mask), agent=agent)


def _hand(p1, p2, extra_p1_turn=False):
    branches = [_branch("player1"), _branch("player2")]
    if extra_p1_turn:  # player1 acted twice: a second branch of the same agent
        branches.append(_branch("player1", (0, 0, 1)))
    return Trace("h", "task", "kuhn", branches, reward=(p1 + p2) / 2, agent_rewards={"player1": p1, "player2": p2})


def _adv(branch):
    return branch.advantages[branch.sampled_mask.index(True)]


def test_registered_as_rae_with_the_contract_decay():
    assert get_registry().get("algorithms", "rae") is RAE
    assert RAE.Config().decay == 0.95
    assert RAE(RAE.Config()).sampling_source() == "policy"


def test_per_agent_ema_baseline_by_hand():
    algo = RAE(RAE.Config())
    group = [_hand(1.0, 0.0), _hand(0.25, 0.75)]
    algo.score_group(group)
    # baselines start at 0: A = own reward
    assert [_adv(b) for t in group for b in t.branches] == [1.0, 0.0, 0.25, 0.75]
    # then b1 = .05 * 1 -> .95 * .05 + .05 * .25 = .06; b2 = 0 -> .05 * .75 = .0375
    assert algo.baselines == pytest.approx({"player1": 0.06, "player2": 0.0375})
    nxt = [_hand(0.5, 0.5, extra_p1_turn=True)]
    algo.score_group(nxt)
    assert [_adv(b) for b in nxt[0].branches] == pytest.approx([0.44, 0.4625, 0.44])
    # an agent with two branches in one hand updates its baseline once
    assert algo.baselines["player1"] == pytest.approx(0.95 * 0.06 + 0.05 * 0.5)


def test_token_layout_and_missing_agent_falls_back_to_trace_reward():
    trace = Trace("t", "task", "env", [_branch("default")], reward=0.5)
    RAE(RAE.Config(decay=0.5)).score_group([trace])
    branch = trace.branches[0]
    assert branch.advantages == [0.0, 0.5, 0.5]
    assert branch.rl_weights == [0.0, 1.0, 1.0]
    assert branch.ce_weights == branch.ref_kl_weights == [0.0, 0.0, 0.0]


def test_a_good_hand_beats_the_running_baseline():
    # after many 0.5-reward hands b -> .5: a winning hand gets +, a losing one -
    algo = RAE(RAE.Config(decay=0.0))  # decay 0: b is the last reward
    algo.score_group([_hand(0.5, 0.5)])
    group = [_hand(1.0, 0.0)]
    algo.score_group(group)
    assert [_adv(b) for b in group[0].branches] == [0.5, -0.5]


@pytest.mark.parametrize("decay", [1.0, -0.1])
def test_decay_out_of_range_is_rejected_by_name(decay):
    with pytest.raises(ValidationError, match="decay"):
        RAE.Config(decay=decay)


def test_importing_the_plugin_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, prl_algo_rae.plugin; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
