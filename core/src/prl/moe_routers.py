"""The MoE routers of a transformers causal LM, found the way transformers itself records
router outputs (the class named in the model's ``_can_record_outputs["router_logits"]``).

Shared by the plugins that touch routers: the torch engine records the experts each token
was routed to, the torch trainer freezes routers, measures their load, shards experts and
replays recorded routes. Modules are duck-typed (anything with ``named_modules``), so core
imports no torch for it."""

from __future__ import annotations

from typing import Any


def named_routers(model: Any) -> list[tuple[str, Any]]:
    """``(name, module)`` of each router, in layer order ([] for a dense model)."""
    recorder = (getattr(model, "_can_record_outputs", None) or {}).get("router_logits")
    cls = getattr(recorder, "target_class", None)
    if cls is None:
        return []
    suffix = getattr(recorder, "layer_name", None)
    return [(n, m) for n, m in model.named_modules() if isinstance(m, cls) and (suffix is None or n.endswith(suffix))]


def routers(model: Any) -> list[Any]:
    """The router modules, in layer order ([] for a dense model)."""
    return [m for _, m in named_routers(model)]
