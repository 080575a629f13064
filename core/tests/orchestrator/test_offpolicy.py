"""The off-policy rules, case by case: batch S trains on version S - 1."""

from __future__ import annotations

import pytest

from prl.orchestrator.offpolicy import dispatch_budget, lag, may_dispatch, oldest_usable


def test_lag_counts_steps_behind_the_weights_the_batch_trains_on():
    assert lag(step=5, version=4) == 0  # on-policy: batch 5 trains on version 4
    assert lag(step=5, version=2) == 2
    assert oldest_usable(step=5, max_off_policy_steps=2) == 2
    assert oldest_usable(step=5, max_off_policy_steps=0) == 4


@pytest.mark.parametrize(
    ("step", "version", "max_off", "allowed"),
    [
        (5, 4, 8, True),  # on-policy
        (5, 3, 8, True),  # one update behind: still sampling
        (5, 2, 8, False),  # two behind: wait for the next weights
        (5, 4, 0, True),
        (5, 3, 0, False),  # strictly on-policy: version 3 cannot feed batch 5
        (5, 3, 1, True),
        (1, 0, 0, True),  # the first batch on the base weights
    ],
)
def test_dispatch_stops_when_inference_is_too_far_behind(step, version, max_off, allowed):
    assert may_dispatch(step, version, max_off) is allowed


@pytest.mark.parametrize(
    ("step", "version", "max_off", "budget"),
    [
        (5, 4, 8, 8),  # serving the weights of batch 5 and they stay usable: two batches
        (5, 3, 8, 4),  # one behind: only this batch
        (5, 4, 0, 4),  # strictly on-policy: the next batch needs version 5
        (5, 4, 1, 8),  # version 4 is still usable for batch 6 with one step off-policy
        (5, 5, 0, 8),
    ],
)
def test_budget_doubles_only_when_the_next_batch_may_use_current_traces(step, version, max_off, budget):
    assert dispatch_budget(step, version, max_off, batch_size=4) == budget
