"""Mixture-of-Experts models in the torch trainer: their routers, freezing them
(``model.freeze_moe_router``) and the routing metrics of every step (``docs/moe.md``).

Routers. The router (gate) of an MoE layer scores the experts for every token and sends
the token to its top k. transformers names each MoE model's router class in
``_can_record_outputs["router_logits"]`` (the module whose output it records as router
logits); the modules of that class are the routers here, in layer order. The routers of
transformers' MoE models (Qwen2/3-MoE, Mixtral, OLMoE, GPT-OSS, DeepSeek-V3, ...) return
``(logits, weights, indices)``; the metrics read the logits and the chosen experts from it.

Metrics, per MoE layer, over every token of a step's training forward passes (prompt and
padding tokens too: they are routed and computed like any other), loads summed over ranks:

    load_e          tokens routed to expert e (a token counts once for each of its k experts)
    max_vio         (max_e load_e - mean load) / mean load
    cv              std_e load_e / mean load (population std)
    max_mean        max_e load_e / mean load
    cold_frac       fraction of experts that got no token
    routing_conf    mean over tokens of the softmax probability mass of the k chosen experts

``<name>/mean`` and ``<name>/max`` are the mean and the max over the MoE layers.
"""

from __future__ import annotations

import logging
import math

import torch
import torch.distributed as tdist
from torch import nn

from prl.config.errors import ConfigError
from prl_trainer_torch.config import check_lora_experts
from prl_trainer_torch.moe_layers import router_experts, routers

log = logging.getLogger("prl.trainer")

# the metric names, in the order the docs list them
METRICS = (
    "max_vio/mean",
    "max_vio/max",
    "routing_confidence/mean",
    "expert_load/cv/mean",
    "expert_load/cv/max",
    "expert_load/max_mean/mean",
    "expert_load/max_mean/max",
    "expert_load/cold_frac/mean",
    "expert_load/cold_frac/max",
)


def idle_expert_params(hf: nn.Module) -> int:
    """Parameters a token does not use: in each MoE layer, the experts beyond its top k
    (the ``experts`` module beside the router holds all of them). Model FLOPs per token
    count only the rest (``perf/mfu``)."""
    idle = 0.0
    for router, _, experts in router_experts(hf):
        top_k = getattr(router, "top_k", None) or getattr(hf.config, "num_experts_per_tok", None)
        if not top_k:
            continue
        idle += sum(p.numel() for p in experts.parameters()) * (1 - top_k / _experts_of(router))
    return round(idle)


def freeze_routers(hf: nn.Module, setting: bool | str, rl: bool, model: str) -> bool:
    """Apply ``model.freeze_moe_router``: ``auto`` freezes in RL and trains in SFT. A frozen
    router's parameters stop requiring gradients, which keeps them out of the optimizer
    (built after this) and out of FSDP's gradient reduction. Returns whether routers were
    frozen; ConfigError when ``true`` is asked of a model without routers."""
    found = routers(hf)
    if setting is True and not found:
        raise ConfigError(f"model.freeze_moe_router: {model} has no MoE router")
    freeze = rl if setting == "auto" else bool(setting)
    if not freeze:
        return False
    for router in found:
        router.requires_grad_(False)
    return bool(found)


def setup_moe(hf: nn.Module, mcfg, rl: bool) -> int:
    """Before the model is parallelized and the optimizer built: freeze the routers as
    ``mcfg.freeze_moe_router`` says (:func:`freeze_routers`), swap in the expert-parallel
    experts when ``mcfg.ep > 1`` (:mod:`prl_trainer_torch.expert_parallel`) and say so in
    the log. A LoRA run whose target modules name the experts is refused here too
    (``prl trainer @ file`` skips the CLI's check of the config). Returns the number of
    routers (0 for a dense model)."""
    found = routers(hf)
    lora = getattr(mcfg, "lora", None)
    if found and lora is not None:
        try:
            check_lora_experts(lora.target_modules, _experts_of(found[0]), mcfg.name)
        except ValueError as exc:
            raise ConfigError(f"model.{exc}") from None
    frozen = freeze_routers(hf, mcfg.freeze_moe_router, rl, mcfg.name)
    ep = getattr(mcfg, "ep", 1)
    if ep > 1:
        from prl_trainer_torch.expert_parallel import install_expert_parallel

        install_expert_parallel(hf, ep, mcfg.name)  # placed over the ranks by parallelize()
    if found:
        # a LoRA run froze the whole base before this, routers included
        state = "frozen" if frozen or not any(p.requires_grad for r in found for p in r.parameters()) else "trained"
        log.info("MoE model: %d routers (%s), %d experts each, ep = %d", len(found), state, _experts_of(found[0]), ep)
        if lora is not None:
            log.info("LoRA on an MoE model: the experts and routers take no adapter and stay frozen (docs/moe.md)")
    return len(found)


def _experts_of(router: nn.Module) -> int:
    for attr in ("num_experts", "n_routed_experts"):
        value = getattr(router, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return int(router.weight.shape[0])


class RoutingStats:
    """Per-layer routing sums of a step, kept on the device by forward hooks on the routers.

    ``stats[l]`` holds layer l's token count per expert, then the sum over tokens of the
    chosen experts' probability mass, then the token count. Hooks only add device tensors,
    so a micro-batch never waits on the device; :meth:`step_metrics` reads them once per
    step. Hooks count only while ``recording`` is set: the policy sets it for its training
    forward passes, so a validation pass or the recomputation of a checkpointed layer in the
    backward pass counts nothing."""

    def __init__(self, modules: list[nn.Module], device: torch.device) -> None:
        self.experts = max((_experts_of(m) for m in modules), default=0)
        self.stats = torch.zeros(len(modules), self.experts + 2, dtype=torch.float64, device=device)
        self.recording = False
        self.handles = [m.register_forward_hook(self._hook(i)) for i, m in enumerate(modules)]

    @classmethod
    def of(cls, hf: nn.Module, device: torch.device) -> RoutingStats | None:
        found = routers(hf)
        return cls(found, device) if found else None

    def _hook(self, layer: int):
        # Opaque to torch.compile: traced, the hook made each compiled decoder layer guard
        # on its layer number and on ``recording``, so 8 layers x 2 states went past
        # dynamo's recompile limit; the layers past it ran eagerly in the recomputation of a
        # checkpointed layer but compiled in its forward, and the backward failed
        # ("Recomputed values ... have different metadata", a Qwen3-30B-A3B shape on an H200).
        @torch.compiler.disable
        def record(module, args, output) -> None:
            if self.recording:
                self.add(layer, output[0], output[-1])

        return record

    @torch.no_grad()
    def add(self, layer: int, logits: torch.Tensor, chosen: torch.Tensor) -> None:
        """Add one forward pass of ``layer``'s router: ``logits`` [..., E], ``chosen`` the
        indices of each token's k experts [..., k]."""
        logits = logits.reshape(-1, logits.shape[-1]).float()
        chosen = chosen.reshape(logits.shape[0], -1).long()
        row = self.stats[layer]
        flat = chosen.reshape(-1)
        # index_add_, not bincount: bincount sizes its output from the data (a device sync).
        row[: self.experts].index_add_(0, flat, torch.ones_like(flat, dtype=row.dtype))
        mass = logits.softmax(-1).gather(-1, chosen).sum()
        row[self.experts] += mass.double()
        row[self.experts + 1] += logits.shape[0]

    def step_metrics(self, world: int = 1) -> dict[str, float]:
        """The step's metrics (module docstring), summed over ranks when ``world > 1`` (a
        collective every rank joins); the sums start again from zero."""
        stats = self.stats.clone()
        self.stats.zero_()
        if world > 1:
            tdist.all_reduce(stats)
        return routing_metrics(stats.tolist(), self.experts)

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


def layer_metrics(loads: list[float]) -> dict[str, float]:
    """max_vio, cv, max_mean and cold_frac of one layer's expert loads (module docstring)."""
    mean = sum(loads) / len(loads)
    std = math.sqrt(sum((x - mean) ** 2 for x in loads) / len(loads))
    return {
        "max_vio": (max(loads) - mean) / mean,
        "expert_load/cv": std / mean,
        "expert_load/max_mean": max(loads) / mean,
        "expert_load/cold_frac": sum(1 for x in loads if x == 0) / len(loads),
    }


def routing_metrics(stats: list[list[float]], experts: int) -> dict[str, float]:
    """Metrics over layers from :class:`RoutingStats` rows ([loads..., mass, tokens]);
    layers that saw no token are left out, and with none at all there are no metrics."""
    per_layer: list[dict[str, float]] = []
    for row in stats:
        loads, mass, tokens = row[:experts], row[experts], row[experts + 1]
        if tokens <= 0 or sum(loads) <= 0:
            continue
        per_layer.append({**layer_metrics(loads), "routing_confidence": mass / tokens})
    if not per_layer:
        return {}
    out: dict[str, float] = {}
    for name in METRICS:
        key, agg = name.rsplit("/", 1)
        values = [m[key] for m in per_layer]
        out[name] = sum(values) / len(values) if agg == "mean" else max(values)
    return out
