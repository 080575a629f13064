"""hierarchical_grpo: episode baselines for episode_agents roles, group baselines for others."""

import pytest
from prl_algo_hierarchical_grpo import HierarchicalGRPO
from pydantic import ValidationError

from prl.plugins import get_registry
from prl.types import Branch, Trace


def _branch(agent):
    return Branch([1, 2, 3, 4], [False, False, True, True], [-1.0] * 4, agent=agent)


def _episode(name, proposer, solvers):
    rewards = {"proposer": proposer, **{f"solver/{i}": r for i, r in enumerate(solvers)}}
    branches = [_branch(agent) for agent in rewards]
    return Trace(name, "task", "proposer-solver", branches, reward=sum(solvers) / max(len(solvers), 1),
                 agent_rewards=rewards)  # fmt: skip


def _score(group, roles=("solver",)):
    HierarchicalGRPO(HierarchicalGRPO.Config(episode_agents=list(roles))).score_group(group)
    return {(t.trace_id, b.agent): b.advantages[2] for t in group for b in t.branches}


def test_registered_and_episode_agents_required():
    assert get_registry().get("algorithms", "hierarchical_grpo") is HierarchicalGRPO
    with pytest.raises(ValidationError, match="episode_agents"):
        HierarchicalGRPO.Config()
    with pytest.raises(ValidationError, match="episode_agents"):
        HierarchicalGRPO.Config(episode_agents=[])
    with pytest.raises(ValidationError, match="episode_agents"):
        HierarchicalGRPO.Config(episode_agents=["solver/0"])  # a role, not an agent id


def test_solvers_against_their_problem_proposers_against_the_group():
    # e1: solve rate 3/4 -> proposer .5; e2: 1/2 -> proposer 1; e3: invalid problem, no solvers
    group = [
        _episode("e1", 0.5, [1.0, 1.0, 1.0, 0.0]),
        _episode("e2", 1.0, [1.0, 0.0]),
        _episode("e3", 0.0, []),
    ]
    adv = _score(group)
    # proposers: group mean (0.5 + 1 + 0) / 3 = .5
    assert [adv[(e, "proposer")] for e in ("e1", "e2", "e3")] == pytest.approx([0.0, 0.5, -0.5])
    # solvers of e1: mean .75; of e2: mean .5
    assert [adv[("e1", f"solver/{i}")] for i in range(4)] == pytest.approx([0.25, 0.25, 0.25, -0.75])
    assert [adv[("e2", f"solver/{i}")] for i in range(2)] == pytest.approx([0.5, -0.5])


def test_without_episode_roles_solvers_share_the_group_baseline():
    group = [_episode("e1", 0.5, [1.0, 1.0, 1.0, 0.0]), _episode("e2", 1.0, [1.0, 0.0])]
    adv = _score(group, roles=("critic",))  # a role with no agents: everything group-level
    # all six solver rewards: mean 4/6
    assert adv[("e1", "solver/0")] == pytest.approx(1 - 4 / 6)
    assert adv[("e2", "solver/1")] == pytest.approx(-4 / 6)


def test_token_layout_and_unscored_agents_use_the_trace_reward():
    trace = Trace("t", "task", "env", [_branch("default")], reward=1.0)
    other = Trace("u", "task", "env", [_branch("default")], reward=0.0)
    adv = _score([trace, other])
    assert (adv[("t", "default")], adv[("u", "default")]) == (0.5, -0.5)
    assert trace.branches[0].advantages == [0.0, 0.0, 0.5, 0.5]
    assert trace.branches[0].rl_weights == [0.0, 0.0, 1.0, 1.0]
    assert trace.branches[0].ce_weights == trace.branches[0].ref_kl_weights == [0.0] * 4


def test_importing_the_plugin_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, prl_algo_hierarchical_grpo.plugin; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
