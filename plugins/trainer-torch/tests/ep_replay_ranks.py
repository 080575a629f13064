"""A torchrun rank for test_routing_replay_ep.py: one batch through the tiny MoE with
routing replay, as FSDP2 alone (``model.ep = 1``) and with expert parallelism
(``model.ep = 2``, with and without activation checkpointing), and with ep = 2 routing
by itself; rank 0 saves each layout's loss and its routers' (gathered) gradients.

``python -m prl.torchrun --standalone --nproc-per-node 2 ep_replay_ranks.py <model> <out.pt>``
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import torch
import torch.distributed as tdist
from ep_ranks import ROWS, SEQ, batch, gathered_grads
from prl_trainer_torch.model import init_distributed, load_hf_model, parallelize
from prl_trainer_torch.moe import setup_moe
from prl_trainer_torch.routing_replay import RouteReplay, replay_routes

LAYERS, TOP_K, EXPERTS = 4, 2, 8


def routes(rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's recorded experts (every other position of its rows; random pairs)."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.rand(ROWS * SEQ, LAYERS, EXPERTS, generator=gen).argsort(-1)[..., :TOP_K].reshape(ROWS * SEQ, -1)
    present = torch.arange(ROWS * SEQ) % 2 == 0
    mine = slice(rank * ROWS * SEQ // world, (rank + 1) * ROWS * SEQ // world)
    return ids[mine], present[mine]


def run(model: str, ep: int, ac: bool, replay: bool = True) -> dict:
    dist = init_distributed()
    hf = load_hf_model(model, torch.float32, "sdpa")
    setup_moe(hf, SimpleNamespace(freeze_moe_router=False, ep=ep, name=model), rl=True)
    policy = parallelize(hf, dist, ac, compile=False, dp=(1, dist.world))
    if replay:
        policy.route_replay = RouteReplay.of(hf, model)
    policy.train()
    ids, pos, targets = batch(dist.rank, dist.world, hf.config.vocab_size)
    replay_routes(policy, routes(dist.rank, dist.world))
    logp, _ = policy(ids, pos, targets)
    nll = -logp.sum()
    (nll * dist.world / (ROWS * SEQ)).backward()
    total = nll.detach().clone()
    tdist.all_reduce(total)
    grads = {k: v for k, v in gathered_grads(hf).items() if k.endswith("mlp.gate.weight")}
    return {"loss": float(total) / (ROWS * SEQ), "router_grads": grads}


def main() -> None:
    model, out = sys.argv[1], sys.argv[2]
    layouts = {"ep1": (1, False), "ep2": (2, False), "ep2-ac": (2, True), "ep2-own": (2, False, False)}
    results = {name: run(model, *layout) for name, layout in layouts.items()}
    if tdist.get_rank() == 0:
        torch.save(results, out)
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
