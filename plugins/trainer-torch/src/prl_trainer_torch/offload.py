"""Optimizer offload: optimizer state (and optionally gradients and fp32 master weights) in
host memory, so a GPU holds little more than the bf16 weights and the activations.

Two modes (``model.optim_cpu_offload``, ``model.full_offload``):

* ``CPUStateAdamW``: AdamW whose moments live on ``state_device`` (the CPU, pinned). At
  ``step()`` the moments stream to the GPU a bucket at a time, the decoupled-weight-decay
  Adam update runs there in fp32, and the moments stream back, overlapping the next bucket's
  copy. The GPU keeps weights and gradients; the 8 bytes per parameter of optimizer state
  (2x the bf16 weights, 4x in fp32) live on the host and only one or two buckets of them
  are on the GPU at a time.
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
from contextlib import nullcontext as _nullcontext

import torch

log = logging.getLogger("prl.trainer")
EPS = 1e-8
BUCKET_NUMEL = 1 << 26  # 64M elements: a bucket's two fp32 moments take 512 MiB on the device
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
    if master.device.type == "cpu":
        # torch's fused CPU AdamW: the same update (decoupled decay, bias-corrected moments)
        # in one multithreaded pass, about 6x faster than the six elementwise passes below.
        # The step count stays a plain int in the state (checkpoints unchanged).
        steps = [torch.tensor(float(state["step"]))]
        torch._fused_adamw_(
            [master], [grad], [state["exp_avg"]], [state["exp_avg_sq"]], [], steps,
            lr=lr, beta1=b1, beta2=b2, weight_decay=0.0, eps=group.get("eps", EPS), amsgrad=False, maximize=False,
        )  # fmt: skip
        return
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


def _moments(state, like: torch.Tensor, device=None, pin: bool = False) -> None:
    """Zero fp32 AdamW moments shaped like ``like`` (on ``device``, else beside it), once."""
    if "step" not in state:
        state["step"] = 0
        for k in ("exp_avg", "exp_avg_sq"):
            state[k] = torch.zeros(like.shape, dtype=torch.float32, device=device or like.device, pin_memory=pin)


class CPUStateAdamW(_HostState):
    """AdamW with its moments on ``state_device`` (pinned host memory when the parameters are on
    a GPU); weights and gradients stay where they are.

    ``step()`` works a bucket of parameters (``BUCKET_NUMEL`` elements) at a time: the bucket's
    moments are copied to the parameters' device on a side stream, updated there next to the
    weights and gradients, and copied back, while the next bucket's moments are already on their
    way in. Updating on the host instead would need every gradient and weight to cross the bus
    and a few host cores to do the arithmetic of the whole model (measured 6x slower per 0.6B
    step on an H200 host: benchmarks/offload.py).
    """

    def __init__(self, params, lr: float, betas=(0.9, 0.999), weight_decay: float = 0.0, state_device="cpu"):
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay, "eps": EPS})
        self.state_device = torch.device(state_device)
        self._stream = None

    def _side(self):
        """The side stream's context on a GPU run; nothing on a host run."""
        return torch.cuda.stream(self._stream) if self._stream is not None else _nullcontext()

    def load_state_dict(self, state_dict) -> None:
        """Loaded moments come back in host fp32; pin them once here (on a GPU run) so every
        step's copies stay asynchronous, instead of checking each tensor at every step."""
        super().load_state_dict(state_dict)
        on_gpu = any(_local(p).is_cuda for group in self.param_groups for p in group["params"])
        for st in self.state.values():
            for k in ("exp_avg", "exp_avg_sq"):
                if on_gpu and k in st:
                    st[k] = st[k].pin_memory()

    def _buckets(self):
        """(parameter, group) pairs with gradients, in buckets of at most BUCKET_NUMEL elements."""
        bucket, size = [], 0
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                n = _local(p).numel()
                if bucket and size + n > BUCKET_NUMEL:
                    yield bucket
                    bucket, size = [], 0
                bucket.append((p, group))
                size += n
        if bucket:
            yield bucket

    def _fetch(self, bucket, dev: torch.device):
        """Start copying ``bucket``'s moments to ``dev``: (device moments, event they are ready at)."""
        moments = []
        with self._side():
            for p, _ in bucket:
                st = self.state[p]
                _moments(st, _local(p), self.state_device, pin=dev.type == "cuda")
                moments.append(tuple(st[k].to(dev, non_blocking=True) for k in ("exp_avg", "exp_avg_sq")))
            ready = self._stream.record_event() if self._stream is not None else None
        return moments, ready

    def _write_back(self, bucket, moments) -> None:
        """Copy the updated moments back to the host once the update that made them is done."""
        done = torch.cuda.current_stream().record_event() if self._stream is not None else None
        with self._side():
            if done is not None:
                self._stream.wait_event(done)
            for (p, _), pair in zip(bucket, moments, strict=True):
                st = self.state[p]
                for k, dev_t in zip(("exp_avg", "exp_avg_sq"), pair, strict=True):
                    if dev_t is not st[k]:  # a host run updates the state tensors themselves
                        st[k].copy_(dev_t, non_blocking=True)

    @torch.no_grad()
    def step(self, closure=None):
        buckets = list(self._buckets())
        if not buckets:
            return None
        dev = _local(buckets[0][0][0]).device
        if dev.type == "cuda" and self._stream is None:
            self._stream = torch.cuda.Stream(dev)
        pending = self._fetch(buckets[0], dev)
        for i, bucket in enumerate(buckets):
            moments, ready = pending
            if i + 1 < len(buckets):
                pending = self._fetch(buckets[i + 1], dev)
            if ready is not None:
                torch.cuda.current_stream().wait_event(ready)
            for (p, group), (m, v) in zip(bucket, moments, strict=True):
                if ready is not None:  # made on the side stream, used and freed on this one
                    m.record_stream(torch.cuda.current_stream())
                    v.record_stream(torch.cuda.current_stream())
                local, st = _local(p).detach(), self.state[p]
                master = local.float()  # fp32 arithmetic; the same tensor when p is fp32
                work = {"step": st["step"], "exp_avg": m, "exp_avg_sq": v}
                _update("adamw", master, _local(p.grad).float(), work, group)
                st["step"] = work["step"]
                if master is not local:
                    local.copy_(master)
            self._write_back(bucket, moments)
        if self._stream is not None:
            self._stream.synchronize()  # the host state is complete before anyone reads it
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
