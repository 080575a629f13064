"""Optimizer offload: optimizer state (and optionally gradients and fp32 master weights) in
host memory, so a GPU holds little more than the bf16 weights and the activations.

Two modes (``model.optim_cpu_offload``, ``model.full_offload``):

* ``CPUStateAdamW``: AdamW whose moments live on ``state_device`` (the CPU). At
  ``step()`` each parameter's gradient is copied to the host, the decoupled-weight-decay
  Adam update is applied there to an fp32 copy of the parameter, and the result is copied
  back into the parameter. The GPU keeps weights and gradients; the 8 bytes per parameter of
  optimizer state (2x the bf16 weights, 4x in fp32) move to the host.
* ``FullOffload``: gradients, fp32 master weights and optimizer state all on the host. A
  post-accumulate-grad hook on every parameter moves its gradient into a host fp32
  accumulator and frees the device gradient as soon as autograd has produced it, so no full
  set of gradients ever exists on the GPU. During the backward of a step's last micro-batch
  (``arm()``) the same hook also runs that parameter's optimizer step on the host and writes
  the new weights back, overlapping the update with the rest of the backward. The global
  gradient norm is therefore unknown when a parameter steps: clipping is off (a warning is
  logged once when ``max_norm`` is set); the norm is still reported after the step.

Update rules (per parameter, host fp32 master θ, gradient g, step t, lr η, decay λ):

    adamw:   m ← β1 m + (1 − β1) g;  v ← β2 v + (1 − β2) g²
             θ ← θ (1 − η λ) − η · (m / (1 − β1^t)) / (sqrt(v / (1 − β2^t)) + ε)
    signsgd: θ ← θ (1 − η λ) − η · sign(g)

Both are torch.optim.Optimizer subclasses, so learning-rate schedulers and the DCP
checkpoint (state keyed by parameter) work unchanged. This module imports only torch (the
H200 benchmark imports it without pydantic). Parameters may be FSDP2 DTensors: the update
works on each rank's local shard.
"""

from __future__ import annotations

import logging
import math

import torch

log = logging.getLogger("prl.trainer")
EPS = 1e-8
_WARNED: set[str] = set()


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (FSDP2), else the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def _update(kind: str, master, grad, state, group) -> None:
    """One step of ``kind`` on host fp32 ``master`` in place (module docstring)."""
    lr, wd = group["lr"], group["weight_decay"]
    if wd:
        master.mul_(1 - lr * wd)
    if kind == "signsgd":
        master.add_(grad.sign(), alpha=-lr)
        return
    b1, b2 = group["betas"]
    state["step"] += 1
    t = state["step"]
    state["exp_avg"].lerp_(grad, 1 - b1)
    state["exp_avg_sq"].mul_(b2).addcmul_(grad, grad, value=1 - b2)
    denom = (state["exp_avg_sq"] / (1 - b2**t)).sqrt_().add_(group.get("eps", EPS))
    master.addcdiv_(state["exp_avg"], denom, value=-lr / (1 - b1**t))


class _HostState(torch.optim.Optimizer):
    """Keeps loaded state in host fp32: torch's load_state_dict casts every state tensor to
    its parameter's device and dtype (the GPU, bf16), which would undo the offload and round
    the moments and masters."""

    state_device = torch.device("cpu")

    def load_state_dict(self, state_dict) -> None:
        host = {
            pid: {
                k: v.to(self.state_device, torch.float32) for k, v in st.items() if torch.is_tensor(v) and k != "step"
            }
            for pid, st in state_dict["state"].items()
        }
        super().load_state_dict(state_dict)
        # saved ids (ints, or names from DCP) pair with the parameters group by group
        saved = [pid for group in state_dict["param_groups"] for pid in group["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        for pid, p in zip(saved, params, strict=True):
            if pid in host:
                self.state[p].update(host[pid])


def _moments(state, like: torch.Tensor) -> None:
    if "step" not in state:
        state["step"] = 0
        state["exp_avg"] = torch.zeros_like(like)
        state["exp_avg_sq"] = torch.zeros_like(like)


class CPUStateAdamW(_HostState):
    """AdamW with its moments on ``state_device``; weights and gradients stay where they are."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), weight_decay: float = 0.0, state_device="cpu"):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay, "eps": EPS})
        self.state_device = torch.device(state_device)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                local = _local(p)
                # blocking device-to-host copies: the host reads them right away
                master = local.detach().to(self.state_device, torch.float32)
                grad = _local(p.grad).to(self.state_device, torch.float32)
                state = self.state[p]
                _moments(state, master)
                _update("adamw", master, grad, state, group)
                local.copy_(master, non_blocking=True)
        return None


class SignSGD(torch.optim.Optimizer):
    """θ ← θ (1 − η λ) − η · sign(g), in place on the parameters (no state)."""

    def __init__(self, params, lr: float, weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    _update("signsgd", _local(p), _local(p.grad), None, group)
        return None


class FullOffload(_HostState):
    """Host gradients, fp32 masters and optimizer state; the step runs inside the backward
    of the micro-batch after ``arm()`` (module docstring). ``kind``: adamw or signsgd."""

    def __init__(self, params, lr: float, kind: str = "adamw", betas=(0.9, 0.999), weight_decay: float = 0.0):
        if kind not in ("adamw", "signsgd"):
            raise ValueError(f"optim.type: full_offload supports adamw and signsgd, not {kind!r}")
        defaults = {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay, "eps": EPS}
        super().__init__(params, defaults)
        self.kind = kind
        self.armed = False
        self.grad_sq = 0.0  # squared norm of the gradients stepped since the last step()
        self.last_grad_norm = 0.0
        self._group_of = {}
        for group in self.param_groups:
            for p in group["params"]:
                self._group_of[p] = group
                local = _local(p).detach()
                pin = local.device.type == "cuda"
                st = self.state[p]
                st["master"] = local.to("cpu", torch.float32, copy=True)
                st["grad"] = torch.zeros_like(st["master"], pin_memory=pin)
                st["has_grad"] = False
                if kind == "adamw":
                    _moments(st, st["master"])
                p.register_post_accumulate_grad_hook(self._on_grad)

    def arm(self) -> None:
        """The next backward is the step's last: step each parameter as its gradient lands."""
        self.armed = True

    @torch.no_grad()
    def _on_grad(self, p: torch.Tensor) -> None:
        st = self.state[p]
        st["grad"].add_(_local(p.grad).to("cpu", torch.float32))
        st["has_grad"] = True
        p.grad = None  # the device never holds more than one parameter's gradient
        if self.armed:
            self._step_param(p)

    def _step_param(self, p: torch.Tensor) -> None:
        st = self.state[p]
        self.grad_sq += float(st["grad"].pow(2).sum())
        _update(self.kind, st["master"], st["grad"], st, self._group_of[p])
        _local(p).detach().copy_(st["master"], non_blocking=True)
        st["grad"].zero_()
        st["has_grad"] = False

    @torch.no_grad()
    def step(self, closure=None):
        """Steps any parameter the armed backward did not reach (or all of them when nothing
        was armed), then records the step's gradient norm and disarms."""
        for p, st in self.state.items():
            if st["has_grad"]:
                self._step_param(p)
        self.last_grad_norm = math.sqrt(self.grad_sq)
        self.grad_sq = 0.0
        self.armed = False
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Device gradients are freed by the hook already; host accumulators reset after stepping."""


def warn_no_clipping(max_norm: float | None) -> None:
    """Log once per process that full offload does not clip the gradient norm."""
    if max_norm is None or "clip" in _WARNED:
        return
    _WARNED.add("clip")
    log.warning(
        "model.full_offload: gradient clipping is off (optim.max_norm = %s is ignored): each parameter "
        "steps during the backward, before the global gradient norm is known",
        max_norm,
    )
