"""Routing replay (``model.routing_replay``, ``docs/moe.md``): an MoE model's trainer routes
each sampled token's prediction to the experts the sampler routed it to.

Why. The trainer and the inference engine compute the same router logits only up to
numerics (kernels, dtype, batch shape) and, once the weights have moved, up to the
weight lag; a near tie between two experts flips, the token goes through another
expert, and the trainer's logprob of a sampled token drifts from the sampler's more than
the dense layers alone would make it (``mismatch_kl`` grows with the number of MoE
layers). Replaying the sampler's expert choice removes that part of the mismatch.

What is replayed. A micro-batch may carry ``routed_experts``: per token, the flat
``layers x top_k`` expert ids the sampler's routers chose at the position that predicted
it (the token's own prediction position, i − 1, as with the sampling masks); ``[]`` where
none was recorded (prompt and observation tokens, a generation the server returned no
routes for). At a position with a record every router keeps computing its logits and its
softmax (so its gradient and the routing weights are the trainer's own), but the top-k
*choice* becomes the recorded ids: the weights are the softmax probabilities of those ids
(renormalised over them when the router normalises its top k). Positions without a record
route as usual.

The seam. transformers' MoE routers return ``(logits, weights, indices)`` (``moe.py``); a
forward hook replaces the weights and indices. The hook runs first among the router's
hooks, so the routing metrics count the experts actually used, and it is opaque to
torch.compile for the reason :class:`prl_trainer_torch.moe.RoutingStats` gives. The
expert-parallel layer (``expert_parallel.py``) takes the indices it is given, so it
replays unchanged. The recorded ids stay set until the next micro-batch's forward: the
backward's recomputation of a checkpointed layer must route as its forward did.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import nn

from prl.config.errors import ConfigError
from prl_trainer_torch.moe_layers import routers

log = logging.getLogger("prl.trainer")

FIELD = "routed_experts"


def routes_of(raw: dict, device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(ids [T, W], present [T]) of a micro-batch's ``routed_experts`` (W = layers x top_k),
    moved onto the prediction positions (position i holds token i + 1's record); None when
    the micro-batch carries none. ConfigError naming the field when the lists disagree."""
    routes = raw.get(FIELD)
    if routes is None:
        return None
    tokens = len(raw["input_ids"])
    if len(routes) != tokens:
        raise ConfigError(f"{FIELD}: {len(routes)} entries for {tokens} tokens; one per token expected")
    widths = {len(r) for r in routes if r}
    if len(widths) > 1:
        raise ConfigError(f"{FIELD}: entries of {sorted(widths)} ids; every recorded token must give layers x top_k")
    width = widths.pop() if widths else 0
    ids = np.zeros((tokens, width), dtype=np.int64)
    present = np.zeros(tokens, dtype=np.bool_)
    for i, r in enumerate(routes):
        if r:
            ids[i] = r
            present[i] = True
    # token i's record describes the forward at position i − 1 (the one that predicted it)
    ids, present = np.roll(ids, -1, 0), np.roll(present, -1)
    present[-1] = False  # the last position predicts no token of this micro-batch
    return torch.from_numpy(ids).to(device), torch.from_numpy(present).to(device)


class RouteReplay:
    """Forward hooks on a model's routers that route with recorded expert ids (module doc)."""

    def __init__(self, modules: list[nn.Module]) -> None:
        self.layers = len(modules)
        self.top_k = int(getattr(modules[0], "top_k", 0) or 0)
        self.ids: torch.Tensor | None = None  # [T, layers, top_k]
        self.present: torch.Tensor | None = None  # [T, 1]
        self.checked = False
        for i, m in enumerate(modules):
            m.register_forward_hook(self._hook(i), prepend=True)

    @classmethod
    def of(cls, hf: nn.Module, model: str) -> RouteReplay:
        found = routers(hf)
        if not found:
            raise ConfigError(f"model.routing_replay: {model} has no MoE router (a dense model routes nothing)")
        log.info("routing replay: %d routers route sampled tokens with the experts inference recorded", len(found))
        return cls(found)

    def set(self, routes: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        """Route the next forward passes with ``routes`` (:func:`routes_of`); None routes as usual."""
        if routes is None or not routes[0].shape[1]:
            self.ids = self.present = None
            return
        ids, present = routes
        width = self.layers * self.top_k
        if ids.shape[1] != width:
            raise ConfigError(
                f"{FIELD}: {ids.shape[1]} ids per token, but the model has {self.layers} MoE layers x "
                f"top_k {self.top_k} = {width} (was it sampled by another model?)"
            )
        self.ids = ids.view(-1, self.layers, self.top_k)
        self.present = present[:, None]

    def _hook(self, layer: int):
        @torch.compiler.disable
        def replay(module, args, output):
            if self.ids is None:
                return None
            return self._replayed(module, output, self.ids[:, layer])

        return replay

    def _replayed(self, module: nn.Module, output: tuple, ids: torch.Tensor) -> tuple:
        """The router's ``output`` with the recorded ``ids`` (and their weights) where present."""
        if not isinstance(output, tuple) or len(output) != 3:
            raise ConfigError(
                f"model.routing_replay: router {type(module).__name__} does not return (logits, weights, indices)"
            )
        logits, weights, chosen = output
        if logits.shape[0] != ids.shape[0]:
            raise RuntimeError(f"routing replay: {ids.shape[0]} recorded positions for {logits.shape[0]} routed tokens")
        if not self.checked:
            self._check_weights(module, logits, weights, chosen)
        picked = _weights(module, logits, ids).to(weights.dtype)
        return (
            logits,
            torch.where(self.present, picked, weights),
            torch.where(self.present, ids.to(chosen.dtype), chosen),
        )

    @torch.no_grad()
    def _check_weights(self, module, logits, weights, chosen) -> None:
        """Once: the router's own weights must be what :func:`_weights` gives its own choice,
        or replayed weights would not be the ones it would have used (one host sync). No
        gradient: a checkpointed layer's recomputation skips the check, and must save the
        same tensors for the backward as its forward did."""
        own = _weights(module, logits, chosen.long()).to(weights.dtype)
        # bfloat16 weights near 0.5 are 2^-8 apart: a rounding step must pass, while another
        # formula (no renormalisation: top-2 of 8 sums to well under 1) is far off
        if not torch.allclose(own.float(), weights.float(), atol=1e-2, rtol=1e-2):
            raise ConfigError(
                f"model.routing_replay: router {type(module).__name__} weighs its experts other than "
                "by their softmax probability (renormalised when norm_topk_prob): replay cannot reproduce it"
            )
        self.checked = True


def _weights(module: nn.Module, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The routing weights of experts ``ids``: their softmax probabilities, renormalised over
    them when the router normalises its top k (Qwen-MoE ``norm_topk_prob``)."""
    picked = logits.float().softmax(-1).gather(-1, ids)
    if getattr(module, "norm_topk_prob", False):
        picked = picked / picked.sum(-1, keepdim=True)
    return picked


def replay_routes(policy, routes: tuple[torch.Tensor, torch.Tensor] | None) -> None:
    """Set (or clear) the routes ``policy``'s next forward passes replay; a policy without
    routing replay ignores them."""
    replay = getattr(policy, "route_replay", None)
    if replay is not None:
        replay.set(routes)
