"""Optimizer and learning-rate schedule.

The schedule multiplies the peak lr by f(s) at optimizer step s (0-based), T total steps,
w warmup steps, d decay steps and r = min_lr_ratio:

    constant: f = 1
    linear:   f = (s + 1) / w during warmup; 1 until the last d steps; then linear to r
    cosine:   f = (s + 1) / w during warmup; then r + (1 - r) * (1 + cos(pi * p)) / 2,
              p = (s - w) / (T - w) the fraction of the post-warmup steps done
"""

from __future__ import annotations

import math
from typing import Any

import torch


def build_optimizer(params, optim_cfg: Any, default_weight_decay: float) -> torch.optim.Optimizer:
    wd = default_weight_decay if optim_cfg.weight_decay == "auto" else float(optim_cfg.weight_decay)
    params = [p for p in params if p.requires_grad]
    if optim_cfg.type == "sgd":
        return torch.optim.SGD(params, lr=optim_cfg.lr, weight_decay=wd)
    return torch.optim.AdamW(params, lr=optim_cfg.lr, betas=tuple(optim_cfg.betas), weight_decay=wd)


def lr_factor(step: int, total: int, sched: Any) -> float:
    """f(step) of the module docstring."""
    if sched.type == "constant":
        return 1.0
    w = min(sched.warmup_steps, max(total - 1, 0))
    if step < w:
        return (step + 1) / w
    r = sched.min_lr_ratio
    if sched.type == "linear":
        d = min(sched.decay_steps, total - w)
        start = total - d
        if d <= 0 or step < start:
            return 1.0
        return 1.0 - (1.0 - r) * (step - start + 1) / d
    span = max(total - w, 1)
    p = min((step - w) / span, 1.0)
    return r + (1.0 - r) * 0.5 * (1.0 + math.cos(math.pi * p))


def build_scheduler(optimizer: torch.optim.Optimizer, sched_cfg: Any, total_steps: int, offset: int = 0):
    """A LambdaLR over ``total_steps``; ``offset`` shifts it when a resume rebuilds it."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s + offset, total_steps, sched_cfg))
