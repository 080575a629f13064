"""Per-role agent rewards of multi-agent tasksets in the orchestrator's step metrics."""

import pytest

from prl.orchestrator.metrics import rollout_metrics
from prl.types import Trace


def test_agent_rewards_are_averaged_per_role_and_env():
    traces = [
        Trace("a", "t", "poker", [], reward=0.5, agent_rewards={"player1": 1.0, "player2": 0.0}),
        Trace("b", "t", "poker", [], reward=0.375, agent_rewards={"player1": 0.0, "player2": 0.75}),
        Trace("c", "t", "ps", [], reward=0.5, agent_rewards={"proposer": 1.0, "solver/0": 1.0, "solver/1": 0.0}),
        Trace("d", "t", "plain", [], reward=1.0),
    ]
    m = rollout_metrics(traces)
    assert m["agent_reward/poker/player1/mean"] == 0.5
    assert m["agent_reward/poker/player2/mean"] == pytest.approx(0.375)
    assert m["agent_reward/ps/solver/mean"] == 0.5  # solver/0 and solver/1 pooled by role
    assert m["agent_reward/all/proposer/mean"] == 1.0
    assert not any(k.startswith("agent_reward/plain/") for k in m)
