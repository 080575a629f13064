"""The schedule's floor min_lr_ratio = r > 0, figured by hand: linear decay heads for r, not
for 0; a cosine run ends at r even when a single step follows its warmup; past the last
step (a finished run extended with a larger max_steps) cosine stays at r."""

from __future__ import annotations

import pytest
import torch
from prl_trainer_torch.config import SchedulerConfig
from prl_trainer_torch.optim import build_scheduler, lr_factor


def test_linear_decay_falls_from_1_to_its_floor_in_equal_steps():
    cfg = SchedulerConfig(type="linear", warmup_steps=0, decay_steps=4, min_lr_ratio=0.2)
    # Decay over steps 2..5: each takes (1 - r) / 4 = 0.2 off, the last one lands on r.
    assert [lr_factor(s, 6, cfg) for s in range(6)] == pytest.approx([1.0, 1.0, 0.8, 0.6, 0.4, 0.2])


def _lr_after_run(cfg: SchedulerConfig, total: int) -> list[float]:
    """The lr of every step of a ``total``-step run and the one it leaves in the optimizer."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = build_scheduler(opt, cfg, total)
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return [*lrs, opt.param_groups[0]["lr"]]


def test_a_cosine_run_with_one_step_after_warmup_ends_at_its_floor():
    cfg = SchedulerConfig(type="cosine", warmup_steps=2, min_lr_ratio=0.1)
    # Warmup 1/2, 2/2; the one post-warmup step starts the cosine (p = 0, the peak) and the
    # run leaves p = 1, the floor r, for a resume to start from.
    assert _lr_after_run(cfg, 3) == pytest.approx([1.0, 2.0, 2.0, 0.2])
    # Without warmup, a one-step run: the peak, then the floor.
    assert _lr_after_run(SchedulerConfig(type="cosine", warmup_steps=0, min_lr_ratio=0.1), 1) == pytest.approx(
        [2.0, 0.2]
    )


def test_cosine_stays_at_its_floor_past_the_last_step():
    cfg = SchedulerConfig(type="cosine", warmup_steps=0, min_lr_ratio=0.1)
    assert lr_factor(2, 4, cfg) == pytest.approx(0.1 + 0.9 * 0.5)  # halfway: cos(pi / 2) = 0
    # Past step 4 of 4 the cosine would rise again (back to the peak at 8); it must not.
    for step in (4, 5, 6, 8):
        assert lr_factor(step, 4, cfg) == pytest.approx(0.1)
