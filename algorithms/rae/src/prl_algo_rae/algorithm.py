"""rae: role-conditioned advantages with a per-agent moving baseline (``docs/algorithms.md``).

Multi-agent tasksets (kuhn-poker, proposer-solver) score each agent separately in
``trace.agent_rewards``; every branch names its agent in ``Branch.agent``. For a branch of
agent a in a trace with that agent's reward r_a:

    A = r_a − b_a

where b_a is an exponential moving average of agent a's past rewards, updated after the
group is scored (so a trace never sees its own reward in its baseline):

    b_a ← decay · b_a + (1 − decay) · r_a      for every (trace, agent) of the group, in order

b_a starts at 0 and lives in the orchestrator process only (it is not checkpointed: after a
resume it warms up again within a few dozen groups). A group-mean baseline is useless
here: in a zero-sum game like Kuhn poker the two seats' rewards mirror each other, and a
group of one seat's episodes often has no spread at all, while the running baseline still
tells a better-than-usual outcome from a worse one.

An agent missing from ``agent_rewards`` (single-agent tasksets: ``"default"``) is scored with
``trace.reward``. Every sampled token of a branch gets its agent's A with rl weight 1; other
tokens get 0.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from prl.advantages import assign_branch
from prl.contracts.algorithm import Algorithm, AlgorithmConfig
from prl.types import Trace


def agent_reward(trace: Trace, agent: str) -> float:
    """The agent's own reward, or the trace's when the taskset scored no agents."""
    return float(trace.agent_rewards.get(agent, trace.reward))


class RAE(Algorithm):
    """Reward minus a per-agent running baseline; the rl loss component."""

    type: ClassVar[str] = "rae"

    class Config(AlgorithmConfig):
        """``[orchestrator.train.algo] type = "rae"``."""

        type: Literal["rae"] = "rae"
        """Selects this algorithm."""
        decay: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.95
        """EMA decay of each agent's baseline: b ← decay·b + (1 − decay)·r."""

    config: Config

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.baselines: dict[str, float] = {}  # agent id -> running baseline (0 until first scored)

    def score_group(self, group: list[Trace]) -> None:
        seen: list[tuple[str, float]] = []
        for trace in group:
            agents: dict[str, float] = {}
            for branch in trace.branches:
                reward = agents.setdefault(branch.agent, agent_reward(trace, branch.agent))
                assign_branch(branch, reward - self.baselines.get(branch.agent, 0.0))
            seen += agents.items()
        decay = self.config.decay
        for agent, reward in seen:
            self.baselines[agent] = decay * self.baselines.get(agent, 0.0) + (1.0 - decay) * reward
