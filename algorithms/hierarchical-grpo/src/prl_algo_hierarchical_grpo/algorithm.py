"""hierarchical_grpo: group baselines at two levels for proposer-solver tasksets
(``docs/algorithms.md``).

In a proposer-solver group every episode starts from the same task; its proposer writes a
problem and several solvers answer that one problem. Agent ids are ``<role>`` or
``<role>/<i>`` (``proposer``, ``solver/0`` … ``solver/3``); per-agent rewards are in
``trace.agent_rewards``. For an agent a with role ρ and reward r_a in episode e:

    ρ in episode_agents:      A = r_a − mean{ r_b : b in e, role(b) = ρ }
    otherwise:                A = r_a − mean{ r_b : b in any episode of the group, role(b) = ρ }

So solvers compete only with the solvers of the same proposed problem (a hard problem
should not punish the solvers who faced it), while proposers compete across the group's
episodes of the same task, like GRPO. An agent missing from ``agent_rewards`` is scored
with ``trace.reward``. Every sampled token of an agent's branches gets its A with rl weight
1; other tokens get 0.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from prl.advantages import assign_branch
from prl.contracts.algorithm import Algorithm, AlgorithmConfig
from prl.types import Trace


def role_of(agent: str) -> str:
    """``solver/2`` → ``solver``; an id without ``/`` is its own role."""
    return agent.split("/", 1)[0]


def episode_rewards(trace: Trace) -> dict[str, float]:
    """Reward per agent of an episode: every scored agent, plus any agent that only has
    branches (scored with ``trace.reward``)."""
    rewards = {agent: float(r) for agent, r in trace.agent_rewards.items()}
    for branch in trace.branches:
        rewards.setdefault(branch.agent, float(trace.reward))
    return rewards


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


class HierarchicalGRPO(Algorithm):
    """GRPO with episode-level baselines for the roles in ``episode_agents``."""

    type: ClassVar[str] = "hierarchical_grpo"

    class Config(AlgorithmConfig):
        """``[orchestrator.train.algo] type = "hierarchical_grpo"``."""

        type: Literal["hierarchical_grpo"] = "hierarchical_grpo"
        """Selects this algorithm."""
        episode_agents: Annotated[list[Annotated[str, Field(pattern=r"^[^/]+$")]], Field(min_length=1)]
        """Roles whose baseline is the mean over their episode (the same proposed problem),
        e.g. ["solver"]; every other role's baseline is its mean over the whole group."""

    config: Config

    def score_group(self, group: list[Trace]) -> None:
        per_episode = [episode_rewards(trace) for trace in group]
        by_role: dict[str, list[float]] = defaultdict(list)
        for rewards in per_episode:
            for agent, reward in rewards.items():
                by_role[role_of(agent)].append(reward)
        group_baseline = {role: _mean(values) for role, values in by_role.items()}
        for trace, rewards in zip(group, per_episode, strict=True):
            baseline = dict(group_baseline)
            for role in self.config.episode_agents:
                mine = [r for agent, r in rewards.items() if role_of(agent) == role]
                if mine:
                    baseline[role] = _mean(mine)
            for branch in trace.branches:
                role = role_of(branch.agent)
                assign_branch(branch, rewards[branch.agent] - baseline[role])
