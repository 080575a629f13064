"""A torchrun rank for test_expert_parallel.py: the same batch through the tiny MoE with
FSDP2 alone (``model.ep = 1``), with expert parallelism (``model.ep = 2``), and with
expert parallelism under activation checkpointing (which recomputes each layer's
all-to-alls in the backward), on the same ranks; rank 0 saves each layout's loss, full
(gathered) gradients before and after clipping and the norm clipped with, the shape of its
local expert weights and how many (token, expert) pairs went to an expert this rank does
not hold.

``python -m prl.torchrun --standalone --nproc-per-node N ep_ranks.py <model> <out.pt>``
(N = 2: ep = world; N = 4: two EP groups, whose expert gradients are also summed across
groups, and expert gradients on another mesh than FSDP's when clipping).
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import torch
import torch.distributed as tdist
from prl_trainer_torch.expert_parallel import clip_grad_norm
from prl_trainer_torch.model import init_distributed, load_hf_model, parallelize
from prl_trainer_torch.moe import setup_moe

ROWS, SEQ = 4, 24
MAX_NORM = 0.5


def batch(rank: int, world: int, vocab: int) -> tuple[torch.Tensor, ...]:
    """This rank's rows of one global batch (the same on every run): two packed documents a
    row, every position a target."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (ROWS, SEQ + 1), generator=gen)
    half = SEQ // 2
    pos = torch.cat([torch.arange(half), torch.arange(SEQ - half)]).expand(ROWS, SEQ)
    mine = slice(rank * ROWS // world, (rank + 1) * ROWS // world)
    return ids[mine, :-1], pos[mine].contiguous(), ids[mine, 1:]


def gathered_grads(hf: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's full gradient (collective: sharded ones are gathered)."""
    out = {}
    for name, param in hf.named_parameters():
        grad = param.grad
        if grad is not None:
            out[name] = (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).detach().clone()
    return out


def remote_pairs(hf: torch.nn.Module, rank: int, ep: int) -> list[int]:
    """A count, filled by the forward, of the pairs the routers send to an expert that
    another member of this rank's EP group holds."""
    from prl_trainer_torch.moe import routers

    count = [0]

    def hook(module, args, output) -> None:
        held = module.num_experts // ep
        count[0] += int((output[-1] // held != rank % ep).sum())

    for router in routers(hf):
        router.register_forward_hook(hook)
    return count


def run(model: str, ep: int, ac: bool) -> dict:
    dist = init_distributed()
    torch.manual_seed(0)
    hf = load_hf_model(model, torch.float32, "sdpa")
    setup_moe(hf, SimpleNamespace(freeze_moe_router=False, ep=ep, name=model), rl=False)
    policy = parallelize(hf, dist, ac, compile=False, dp=(1, dist.world))
    policy.train()
    remote = remote_pairs(hf, dist.rank, ep)
    ids, pos, targets = batch(dist.rank, dist.world, hf.config.vocab_size)
    tokens = ROWS * SEQ
    logp, _ = policy(ids, pos, targets)
    nll = -logp.sum()
    # as the SFT step scales it: FSDP averages gradients over ranks
    (nll * dist.world / tokens).backward()
    total = nll.detach().clone()
    tdist.all_reduce(total)
    local = [m for m in hf.modules() if type(m).__name__ == "ExpertParallelExperts"]
    shapes = [tuple(m.gate_up_proj.to_local().shape) for m in local]
    sent = torch.tensor(remote, dtype=torch.float64)
    tdist.all_reduce(sent)
    grads = gathered_grads(hf)
    # the optimizer step's clipping, active (the norm is about 4): one norm over every mesh
    norm = clip_grad_norm(policy.parameters(), MAX_NORM)
    norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    return {
        "loss": float(total) / tokens,
        "grads": grads,
        "norm": norm,
        "clipped": gathered_grads(hf),
        "local_shapes": shapes,
        "remote_pairs": int(sent),
    }


def main() -> None:
    model, out = sys.argv[1], sys.argv[2]
    layouts = {"ep1": (1, False), "ep2": (2, False), "ep2-ac": (2, True)}
    results = {name: run(model, ep, ac) for name, (ep, ac) in layouts.items()}
    if tdist.get_rank() == 0:
        torch.save(results, out)
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
