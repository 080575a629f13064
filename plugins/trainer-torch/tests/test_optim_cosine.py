"""A cosine schedule halfway through its decay is at the middle of its range."""

from __future__ import annotations

import pytest
from prl_trainer_torch.optim import lr_factor

from prl.config.sections import SchedulerConfig


def test_cosine_is_halfway_down_halfway_through_its_decay():
    cfg = SchedulerConfig(type="cosine", warmup_steps=1, min_lr_ratio=0.2)
    # 5 steps, 1 of warmup: the decay spans 4; step 3 is 2/4 of the way, cos(pi/2) = 0.
    assert lr_factor(3, 5, cfg) == pytest.approx(0.2 + 0.8 * 0.5)
    assert lr_factor(2, 5, cfg) == pytest.approx(0.2 + 0.8 * 0.5 * (1 + 2**-0.5))
