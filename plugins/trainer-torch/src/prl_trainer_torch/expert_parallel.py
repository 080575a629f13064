"""Expert parallelism (``model.ep``) for the MoE layers of a transformers model.

With ``ep = P`` the ranks form groups of P consecutive ranks; inside a group, rank c holds
experts ``[c * L, (c + 1) * L)`` of every MoE layer (``L = num_experts / P``) and no copy of
the others. The router stays replicated (FSDP-sharded like any other weight): each rank
routes its own tokens, then an MoE layer

1. sorts its (token, expert) pairs by expert, so the pairs for each owner are contiguous;
2. tells every member how many pairs it sends for each of that member's experts
   (an all-to-all of counts: the split sizes of the next two);
3. sends the pairs' hidden states to their owners (all-to-all);
4. runs its L experts over what it received, grouped by expert (:func:`expert_mlp`);
5. sends the outputs back the same way (all-to-all);
6. weights each pair's output with its routing weight and sums a token's k pairs, on the
   token's own rank, so the router's gradient never leaves it.

The all-to-alls are differentiable (the backward is the same exchange, reversed), so an
expert's gradient is summed on its owner over every token of the group that used it. FSDP
averages the other gradients over all ranks; the expert gradients get the same mean: each
is divided by the world size and summed over the ranks that hold the same experts (one
per group, ``world / ep`` of them).

The expert weights are DTensors sharded on the expert dimension: a checkpoint holds the
full ``[num_experts, ...]`` tensors (DCP writes each rank's rows), an export and a resume
with another ``ep`` or world size read them back, and a full state dict (the weights
published to inference) gathers them. FSDP leaves them alone (``ignored_params``).
"""

from __future__ import annotations

import torch
import torch.distributed as tdist
import torch.nn.functional as F
from torch import nn

from prl.config.errors import ConfigError
from prl_trainer_torch.moe_layers import router_experts

EXPERT_WEIGHTS = ("gate_up_proj", "down_proj")


GROUPED_GEMM = "auto"
"""How :func:`expert_mlp` runs the experts: ``"auto"`` (one grouped GEMM per projection on a
CUDA device, a loop over the experts elsewhere), ``"grouped"`` or ``"loop"`` everywhere. A
module switch, not a setting: the result is the same up to round-off, only the speed
differs (``benchmarks/moe_step_throughput.py`` measures both)."""


def expert_mlp(x: torch.Tensor, counts: list[int], gate_up: torch.Tensor, down: torch.Tensor, act) -> torch.Tensor:
    """The local experts over ``x``, whose rows are grouped by expert (``counts[e]`` rows
    for local expert e, in order): ``down_e(act(gate_e x) * up_e x)``.

    On a GPU each projection is one grouped GEMM over the cumulative counts: one kernel for
    all experts, where a loop launches two matmuls per expert and leaves the GPU idle
    between them. Every expert runs in the loop too, an empty one on zero rows, so each
    rank's autograd graph has the same nodes whatever the routing: the collectives in the
    backward then line up."""
    if _grouped(x):
        offsets = torch.tensor(counts).cumsum(0, dtype=torch.int32).to(x.device, non_blocking=True)
        gate, up = _grouped_mm(x, gate_up, offsets).chunk(2, dim=-1)
        return _grouped_mm(act(gate) * up, down, offsets)
    outs = []
    for e, rows in enumerate(x.split(counts)):
        gate, up = F.linear(rows, gate_up[e]).chunk(2, dim=-1)
        outs.append(F.linear(act(gate) * up, down[e]))
    return torch.cat(outs)


def _grouped(x: torch.Tensor) -> bool:
    if GROUPED_GEMM == "loop" or x.shape[0] == 0 or not hasattr(torch, "_grouped_mm"):
        return False
    return GROUPED_GEMM == "grouped" or x.is_cuda


def _grouped_mm(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``x @ weight[e].T`` for the rows of each expert e, ``weight`` as ``[E, out, in]``."""
    mm = getattr(F, "grouped_mm", None) or torch._grouped_mm
    return mm(x.to(weight.dtype), weight.transpose(-2, -1), offs=offsets)


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` with uneven splits; its backward sends the gradients back."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, send: list[int], recv: list[int], group) -> torch.Tensor:
        ctx.send, ctx.recv, ctx.group = send, recv, group
        return _exchange(x, send, recv, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _exchange(grad, ctx.recv, ctx.send, ctx.group), None, None, None


def _exchange(x: torch.Tensor, send: list[int], recv: list[int], group) -> torch.Tensor:
    out = x.new_empty((sum(recv), *x.shape[1:]))
    tdist.all_to_all_single(out, x.contiguous(), output_split_sizes=recv, input_split_sizes=send, group=group)
    return out


class _ExpertGrad(torch.autograd.Function):
    """Identity forward; backward turns the group's summed expert gradient into the mean
    over all ranks that FSDP gives every other weight (module docstring)."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor, world: int, replicas) -> torch.Tensor:
        ctx.world, ctx.replicas, ctx.dtype = world, replicas, weight.dtype
        return weight.view_as(weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.float() / ctx.world  # summed in float32, as FSDP reduces (reduce_dtype)
        if ctx.replicas is not None:
            tdist.all_reduce(grad, group=ctx.replicas)
        return grad.to(ctx.dtype), None, None


class ExpertParallelExperts(nn.Module):
    """Takes the place of a transformers experts module (same call, same parameter names,
    so state dicts and checkpoints keep their keys) and runs it expert-parallel."""

    def __init__(self, experts: nn.Module, ep: int) -> None:
        super().__init__()
        self.num_experts = experts.num_experts
        self.ep = ep
        self.act_fn = experts.act_fn
        for name in EXPERT_WEIGHTS:
            setattr(self, name, getattr(experts, name))
        self.group = None  # the EP group's process group, set by shard_experts
        self.replicas = None  # the ranks holding the same experts (None: only this one)
        self.world = 1

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.ep

    def extra_repr(self) -> str:
        return f"num_experts={self.num_experts}, ep={self.ep}"

    @torch.compiler.disable  # data-dependent split sizes and collectives: kept out of compiled layers
    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor):
        if self.group is None:
            raise RuntimeError("expert-parallel experts used before shard_experts() placed them")
        n, k = top_k_index.shape
        flat = top_k_index.reshape(-1)
        order = torch.argsort(flat, stable=True)  # pairs grouped by expert, hence by owner
        send, recv, counts, recv_counts = self._counts(flat)
        got = _AllToAll.apply(hidden_states[order // k], send, recv, self.group)
        # what arrived is grouped by source rank, then by expert: regroup by expert alone
        local = torch.arange(self.local_experts, device=flat.device).repeat(self.ep)
        by_expert = torch.argsort(torch.repeat_interleave(local, recv_counts.reshape(-1)), stable=True)
        gate_up, down = (_ExpertGrad.apply(self._local(w), self.world, self.replicas) for w in EXPERT_WEIGHTS)
        out = expert_mlp(got[by_expert], counts, gate_up, down, self.act_fn)
        back = _AllToAll.apply(out[torch.argsort(by_expert)], recv, send, self.group)
        pairs = back[torch.argsort(order)].view(n, k, -1)
        mixed = (pairs * top_k_weights.unsqueeze(-1).to(pairs.dtype)).sum(dim=1)
        return mixed.to(hidden_states.dtype)

    def _local(self, name: str) -> torch.Tensor:
        weight = getattr(self, name)
        return weight.to_local() if hasattr(weight, "to_local") else weight

    def _counts(self, flat: torch.Tensor) -> tuple[list[int], list[int], list[int], torch.Tensor]:
        """(pairs sent to each member, pairs received from each, received pairs per local
        expert, and per source and local expert ``[ep, L]``). One host sync per layer: the
        split sizes of the all-to-alls live on the host."""
        per_expert = torch.bincount(flat, minlength=self.num_experts)
        got = torch.empty_like(per_expert)
        tdist.all_to_all_single(got, per_expert, group=self.group)
        got = got.view(self.ep, self.local_experts)
        sizes = torch.cat([per_expert.view(self.ep, self.local_experts).sum(1), got.sum(1), got.sum(0)]).tolist()
        ep = self.ep
        return sizes[:ep], sizes[ep : 2 * ep], sizes[2 * ep :], got


def moe_experts(hf: nn.Module) -> list[tuple[nn.Module, nn.Module]]:
    """(MoE block, its experts module) of each MoE layer, found beside the routers."""
    return [(block, experts) for _, block, experts in router_experts(hf)]


def _unsupported(experts: nn.Module) -> str | None:
    """Why this experts module cannot run expert-parallel (None: it can): the layout must be
    fused [E, 2I, H] gate+up and [E, H, I] down weights without biases, gated by act(gate) * up."""
    from transformers.integrations.moe import _default_apply_gate

    weights = [getattr(experts, n, None) for n in EXPERT_WEIGHTS]
    if any(not isinstance(w, torch.Tensor) or w.dim() != 3 for w in weights):
        return "its experts are not fused gate_up_proj / down_proj tensors"
    if getattr(experts, "has_bias", False) or getattr(experts, "is_transposed", False):
        return "its experts have biases or transposed weights"
    if not getattr(experts, "has_gate", True) or not getattr(experts, "is_concatenated", True):
        return "its experts are not gated act(gate) * up with gate and up concatenated"
    if getattr(type(experts), "_apply_gate", _default_apply_gate) is not _default_apply_gate:
        return "its experts use their own gating function"
    return None


def install_expert_parallel(hf: nn.Module, ep: int, model: str) -> int:
    """Replace every MoE layer's experts module with :class:`ExpertParallelExperts` (not
    placed yet: :func:`shard_experts` does that once the process groups exist). Returns the
    number of layers; ConfigError naming ``model.ep`` for a model it cannot serve."""
    found = moe_experts(hf)
    if not found:
        raise ConfigError(f"model.ep: {model} has no MoE experts to split (ep = {ep} needs an MoE model)")
    for block, experts in found:
        why = _unsupported(experts)
        if why is not None:
            raise ConfigError(f"model.ep: {type(experts).__name__} of {model} cannot run expert-parallel: {why}")
        if experts.num_experts % ep:
            raise ConfigError(f"model.ep: {ep} does not divide the {experts.num_experts} experts of {model}")
        block.experts = ExpertParallelExperts(experts, ep)
    return len(found)


def shard_experts(hf: nn.Module, fsdp_mesh, world: int, replicas: int) -> set[nn.Parameter]:
    """Place the experts of :func:`install_expert_parallel`: build the EP process groups
    (collective: every rank calls it), keep each rank's rows of every expert weight as a
    DTensor, and return those parameters for FSDP to ignore (empty without EP).

    The DTensors live on FSDP's own mesh where its shard dimension is exactly the EP group
    (so gradient clipping sees one mesh), else on a ``(world / ep, ep)`` mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    layers = [m for m in hf.modules() if isinstance(m, ExpertParallelExperts)]
    if not layers:
        return set()
    ep = layers[0].ep
    device = fsdp_mesh.device_type
    comm = init_device_mesh(device, (world // ep, ep), mesh_dim_names=("edp", "ep"))
    if replicas == 1 and ep == world:
        mesh, placements = fsdp_mesh, (Shard(0),)
    elif fsdp_mesh.ndim == 2 and fsdp_mesh.shape[1] == ep:
        mesh, placements = fsdp_mesh, (Replicate(), Shard(0))
    else:
        mesh, placements = comm, (Replicate(), Shard(0))
    ignored: set[nn.Parameter] = set()
    for layer in layers:
        layer.group = comm.get_group("ep")
        layer.replicas = comm.get_group("edp") if world > ep else None
        layer.world = world
        for name in EXPERT_WEIGHTS:
            old = getattr(layer, name)
            # every rank holds the same full weights (one checkpoint): keep its rows, no traffic
            local = distribute_tensor(old.detach(), mesh, placements, src_data_rank=None)
            param = nn.Parameter(local, requires_grad=old.requires_grad)
            setattr(layer, name, param)
            ignored.add(param)
    return ignored


def clip_grad_norm(parameters, max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` for gradients that may live on two device meshes:
    with ``ep`` below FSDP's shard group, the experts' (the ``(world / ep, ep)`` mesh) and
    everyone else's (FSDP's), which torch will not stack into one norm. Each mesh's norm is
    reduced where its gradients live, and their 2-norm clips all of them. On one mesh (or
    none) this is torch's own, untouched."""
    params = [p for p in parameters if p.grad is not None]
    groups: dict = {}
    for param in params:
        groups.setdefault(getattr(param.grad, "device_mesh", None), []).append(param)
    if len(groups) <= 1:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    norms = []
    for group in groups.values():
        norm = torch.nn.utils.get_total_norm([p.grad for p in group])
        norms.append(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    total = torch.linalg.vector_norm(torch.stack(norms))
    # the scale as a number: a DTensor of one mesh cannot multiply another mesh's gradients
    coef = min(max_norm / (float(total) + 1e-6), 1.0)
    for group in groups.values():
        torch._foreach_mul_([p.grad for p in group], coef)
    return total
