"""Finding the MoE layers of a transformers causal LM: its routers and the experts module
beside each, in layer order.

Kept apart from :mod:`prl_trainer_torch.moe` (router freezing and metrics) because the
expert-parallel layer, which ``moe.setup_moe`` installs, needs it too.
"""

from __future__ import annotations

from torch import nn


def named_routers(hf: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, module) of each router of a transformers causal LM, in layer order."""
    recorder = (getattr(hf, "_can_record_outputs", None) or {}).get("router_logits")
    cls = getattr(recorder, "target_class", None)
    if cls is None:
        return []
    suffix = getattr(recorder, "layer_name", None)
    return [(n, m) for n, m in hf.named_modules() if isinstance(m, cls) and (suffix is None or n.endswith(suffix))]


def routers(hf: nn.Module) -> list[nn.Module]:
    """The router modules of a transformers causal LM, in layer order ([] for a dense one)."""
    return [m for _, m in named_routers(hf)]


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
