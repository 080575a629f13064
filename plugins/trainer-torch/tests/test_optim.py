"""Learning-rate schedules."""

from __future__ import annotations

import pytest
from prl_trainer_torch.config import SchedulerConfig
from prl_trainer_torch.optim import lr_factor


def test_constant_has_no_warmup():
    assert [lr_factor(s, 10, SchedulerConfig(type="constant")) for s in range(3)] == [1.0, 1.0, 1.0]


def test_linear_warmup_hold_and_decay():
    cfg = SchedulerConfig(type="linear", warmup_steps=2, decay_steps=4, min_lr_ratio=0.2)
    f = [lr_factor(s, 10, cfg) for s in range(10)]
    assert f[:2] == [0.5, 1.0] and f[2:6] == [1.0] * 4
    assert f[-1] == pytest.approx(0.2) and f[6] < 1.0 and sorted(f[6:], reverse=True) == f[6:]


def test_cosine_ends_at_min_ratio():
    cfg = SchedulerConfig(type="cosine", warmup_steps=3, min_lr_ratio=0.1)
    f = [lr_factor(s, 20, cfg) for s in range(21)]
    assert f[2] == 1.0 and f[3] == pytest.approx(1.0)
    assert f[20] == pytest.approx(0.1) and all(a >= b for a, b in zip(f[3:], f[4:], strict=False))
