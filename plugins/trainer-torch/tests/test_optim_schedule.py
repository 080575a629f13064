"""The schedule's edges, figured by hand: warmup longer than the run, decay longer than
what follows warmup, a one-step run, a scheduler rebuilt at an offset; and the gradient
norm an FSDP run reports (the whole model's, not one rank's shard)."""

from __future__ import annotations

import pytest
import torch
from prl_trainer_torch import optim
from prl_trainer_torch.config import SchedulerConfig
from prl_trainer_torch.optim import build_scheduler, lr_factor, optimizer_step


def factors(total: int, **cfg) -> list[float]:
    sched = SchedulerConfig(**cfg)
    return [lr_factor(s, total, sched) for s in range(total)]


def test_warmup_longer_than_the_run_ends_one_step_before_its_end():
    # 3 steps, warmup 10: warmup shrinks to 2 steps (1/2, 2/2), the last step at the peak.
    assert factors(3, type="cosine", warmup_steps=10, min_lr_ratio=0.0) == pytest.approx([0.5, 1.0, 1.0])


def test_a_one_step_run_has_no_warmup():
    # No step is left after a warmup, so the only step decays to the end ratio at once.
    assert factors(1, type="linear", warmup_steps=5, decay_steps=5, min_lr_ratio=0.1) == pytest.approx([0.1])
    assert factors(1, type="cosine", warmup_steps=5, min_lr_ratio=0.1) == pytest.approx([1.0])


def test_decay_longer_than_the_steps_after_warmup_decays_over_those_only():
    f = factors(6, type="linear", warmup_steps=2, decay_steps=100, min_lr_ratio=0.0)
    assert f == pytest.approx([0.5, 1.0, 0.75, 0.5, 0.25, 0.0])


def test_a_scheduler_rebuilt_at_an_offset_continues_the_schedule():
    cfg = SchedulerConfig(type="linear", warmup_steps=0, decay_steps=4, min_lr_ratio=0.0)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_scheduler(opt, cfg, total_steps=4, offset=2)
    lrs = []
    for _ in range(2):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.25, 0.0])  # steps 2 and 3 of 4: 1 - 3/4, 1 - 4/4


class _Sharded:
    """What clip_grad_norm_ returns under FSDP2: a DTensor whose local value is one rank's."""

    def full_tensor(self) -> torch.Tensor:
        return torch.tensor(5.0)

    def __float__(self) -> float:
        return 1.0


def test_an_fsdp_run_reports_the_whole_models_gradient_norm(monkeypatch):
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    monkeypatch.setattr(optim.torch.nn.utils, "clip_grad_norm_", lambda params, max_norm: _Sharded())
    assert optimizer_step(opt, model, 1.0) == 5.0
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("min_lr_ratio", [0.0, 0.1])
def test_linear_decay_never_goes_below_its_floor_after_the_last_step(min_lr_ratio):
    """A finished run leaves the factor of step `total` in the optimizer; extending the run
    with a larger max_steps must not train at a negative (or below-floor) learning rate."""
    cfg = SchedulerConfig(type="linear", warmup_steps=0, decay_steps=4, min_lr_ratio=min_lr_ratio)
    assert lr_factor(3, 4, cfg) == pytest.approx(min_lr_ratio)  # the last step reaches the floor
    for step in (4, 5, 9):
        assert lr_factor(step, 4, cfg) == pytest.approx(min_lr_ratio)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=3e-3)
    sched = build_scheduler(opt, cfg, 4)
    for _ in range(4):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(3e-3 * min_lr_ratio)
