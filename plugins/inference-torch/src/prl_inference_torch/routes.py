"""Recording the experts an MoE model routes each generated token's prediction to
(``return_routed_experts``, routing replay: ``docs/moe.md``).

A completion token t_j is sampled from the logits of one forward position: the last
prompt token's (prefill) for t_0, t_{j−1}'s (a decode step) after it. The experts every
MoE layer chose *at that position* are what the trainer must reuse to reproduce the
logprob of t_j, so each completion token gets them: ``layers x top_k`` ids, flat, layer by
layer. Earlier prompt positions are not recorded (the trainer routes them itself).

transformers' MoE routers return ``(logits, weights, indices)`` and the router class is
named in the model's ``_can_record_outputs["router_logits"]``; a forward hook on each keeps
the indices of the last forward, and :meth:`RouteRecorder.last_positions` reads the last
position of every row (prompts are left-padded, so that is each prompt's last token).
"""

from __future__ import annotations

import torch
from torch import nn

from prl.moe_routers import routers


class RouteRecorder:
    """Forward hooks that keep each router's chosen experts of the last forward pass."""

    def __init__(self, model: nn.Module) -> None:
        found = routers(model)
        if not found:
            raise ValueError("return_routed_experts: the model has no MoE router (a dense model routes nothing)")
        self._chosen: list[torch.Tensor | None] = [None] * len(found)
        for i, m in enumerate(found):
            m.register_forward_hook(self._hook(i))

    def _hook(self, layer: int):
        def keep(module, args, output) -> None:
            self._chosen[layer] = output[-1]

        return keep

    def last_positions(self, rows: int) -> torch.Tensor:
        """[rows, layers, top_k]: the experts chosen at the last position of each of the
        ``rows`` rows of the last forward pass."""
        per_layer = [c.reshape(rows, -1, c.shape[-1])[:, -1] for c in self._chosen]
        return torch.stack(per_layer, 1)
