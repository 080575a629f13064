"""Finding the MoE layers of a transformers causal LM: its routers and the experts module
beside each, in layer order.

Kept apart from :mod:`prl_trainer_torch.moe` (router freezing and metrics) because the
expert-parallel layer, which ``moe.setup_moe`` installs, needs it too.
"""

from __future__ import annotations

from torch import nn

from prl.moe_routers import named_routers, routers

__all__ = ["named_routers", "router_experts", "routers"]


def router_experts(hf: nn.Module) -> list[tuple[nn.Module, nn.Module, nn.Module]]:
    """(router, MoE block, its experts module) of each MoE layer whose block holds its
    experts as ``experts`` beside the router."""
    modules = dict(hf.named_modules())
    found = []
    for name, router in named_routers(hf):
        block = modules.get(name.rpartition(".")[0])
        experts = getattr(block, "experts", None)
        if experts is not None:
            found.append((router, block, experts))
    return found
