"""A cosine schedule halfway through its decay is at the middle of its range; a schedule
without decay can be stepped once past the run."""

from __future__ import annotations

import pytest
from prl_trainer_torch.config import SchedulerConfig
from prl_trainer_torch.optim import lr_factor


def test_cosine_is_halfway_down_halfway_through_its_decay():
    cfg = SchedulerConfig(type="cosine", warmup_steps=1, min_lr_ratio=0.2)
    # 5 steps, 1 of warmup: the decay spans 4; step 3 is 2/4 of the way, cos(pi/2) = 0.
    assert lr_factor(3, 5, cfg) == pytest.approx(0.2 + 0.8 * 0.5)
    assert lr_factor(2, 5, cfg) == pytest.approx(0.2 + 0.8 * 0.5 * (1 + 2**-0.5))


def test_the_scheduler_steps_past_the_last_step_without_decay():
    # LambdaLR evaluates the factor once more after the final optimizer step.
    cfg = SchedulerConfig(type="linear", warmup_steps=0, decay_steps=0)
    assert [lr_factor(s, 3, cfg) for s in range(4)] == [1.0, 1.0, 1.0, 1.0]
