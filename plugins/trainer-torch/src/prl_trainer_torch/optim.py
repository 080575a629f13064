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

from prl.config.errors import ConfigError
from prl_trainer_torch.expert_parallel import clip_grad_norm
from prl_trainer_torch.offload import CPUStateAdamW, FullOffload, SignSGD, warn_no_clipping


def build_optimizer(
    params, optim_cfg: Any, default_weight_decay: float, model_cfg: Any = None, device: torch.device | None = None
) -> torch.optim.Optimizer:
    """The optimizer of ``optim_cfg``, offloaded as ``model_cfg`` asks
    (:mod:`prl_trainer_torch.offload`): ``full_offload`` anywhere, ``optim_cpu_offload`` only
    when the parameters live off the host (on a CPU run the state is in host memory anyway)."""
    wd = default_weight_decay if optim_cfg.weight_decay == "auto" else float(optim_cfg.weight_decay)
    params = [p for p in params if p.requires_grad]
    betas = tuple(optim_cfg.betas)
    if model_cfg is not None and model_cfg.full_offload:
        if optim_cfg.type == "sgd":
            raise ConfigError("optim.type: model.full_offload supports adamw and signsgd, not sgd")
        if any(hasattr(p, "to_local") for p in params):
            # FSDP2 writes reduced gradients without autograd's accumulate hooks
            raise ConfigError("model.full_offload: supported with num_workers = 1 only")
        warn_no_clipping(optim_cfg.max_norm)
        return FullOffload(params, lr=optim_cfg.lr, kind=optim_cfg.type, betas=betas, weight_decay=wd)
    if optim_cfg.type == "sgd":
        return torch.optim.SGD(params, lr=optim_cfg.lr, weight_decay=wd)
    if optim_cfg.type == "signsgd":
        return SignSGD(params, lr=optim_cfg.lr, weight_decay=wd)
    offload = model_cfg is not None and model_cfg.optim_cpu_offload
    if offload and device is not None and device.type != "cpu":
        return CPUStateAdamW(params, lr=optim_cfg.lr, betas=betas, weight_decay=wd)
    # On a GPU the fused kernel updates every parameter in a few launches (the default
    # for-each path took ~8% of a 0.6B SFT step on an H100); the CPU keeps the default.
    fused = device is not None and device.type == "cuda" or None
    return torch.optim.AdamW(params, lr=optim_cfg.lr, betas=betas, weight_decay=wd, fused=fused)


def optimizer_step(optimizer: torch.optim.Optimizer, policy, max_norm: float) -> float:
    """Clip the gradient norm to ``max_norm``, step, clear gradients; the pre-clip norm.
    Under full offload the parameters have stepped during the backward already (no
    clipping) and the norm is the one the optimizer measured."""
    if isinstance(optimizer, FullOffload):
        optimizer.step()
        return optimizer.last_grad_norm
    grad_norm = clip_grad_norm(policy.parameters(), max_norm)
    if hasattr(grad_norm, "full_tensor"):
        grad_norm = grad_norm.full_tensor()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(grad_norm)


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
        # Past the last step (the factor the scheduler leaves in the optimizer when a run
        # ends, which a resume with a larger max_steps would train with) it stays at r.
        return max(r, 1.0 - (1.0 - r) * (step - start + 1) / d)
    span = max(total - w, 1)
    p = min((step - w) / span, 1.0)
    return r + (1.0 - r) * 0.5 * (1.0 + math.cos(math.pi * p))


def build_scheduler(optimizer: torch.optim.Optimizer, sched_cfg: Any, total_steps: int, offset: int = 0):
    """A LambdaLR over ``total_steps``; ``offset`` shifts it when a resume rebuilds it."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s + offset, total_steps, sched_cfg))
