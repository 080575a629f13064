"""The torch trainer's settings: ``trainer.model``, ``trainer.optim`` and ``trainer.scheduler``
(``prl sft``: ``model``, ``optim``, ``scheduler``, and the SFT ``loss``).

Core knows only the bases in :mod:`prl.config.policy`; :class:`TorchTrainer` names these
classes, and core composes them into the root configs through the registry, so the user
still writes ``trainer.model.activation_checkpointing``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from prl.config.base import PrlModel
from prl.config.errors import ConfigError
from prl.config.policy import (
    LORA_TARGETS,
    TrainerModelConfig,
    TrainerOptimConfig,
    TrainerSchedulerConfig,
    TrainerSFTLossConfig,
)
from prl_trainer_torch.vlm import check_vlm

# config.json keys that give an MoE model's number of routed experts (Qwen-MoE; Mixtral and
# GPT-OSS; DeepSeek), read at resolve time without torch or transformers.
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def config_experts(config: dict) -> int:
    """Routed experts per MoE layer that a ``config.json`` dict names (0: a dense model). A
    multimodal model's language part is under ``text_config``."""
    for cfg in (config, config.get("text_config") or {}):
        for key in EXPERT_KEYS:
            value = cfg.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return 0


def check_ep(ep: int, experts: int, model: str) -> None:
    """ValueError (``ep: why``) when ``ep`` ranks cannot split ``experts`` routed experts
    per layer between them (0: a dense model)."""
    if experts == 0:
        raise ValueError(f"ep: {model} is a dense model (its config.json names no experts); ep = {ep} needs an MoE")
    if experts % ep:
        raise ValueError(f"ep: {ep} does not divide the {experts} experts of each MoE layer of {model}")


# Names of an MoE layer's expert projections in transformers: the fused 3-D parameters of its
# ``experts`` module (gate_up_proj, down_proj), and the per-expert linear layers of published
# checkpoints (Qwen and DeepSeek: gate_proj, up_proj, down_proj; Mixtral: w1, w2, w3).
EXPERT_TARGETS = frozenset({"experts", "gate_up_proj", "gate_proj", "up_proj", "down_proj", "w1", "w2", "w3"})


def check_lora_experts(targets: list[str], experts: int, model: str) -> None:
    """ValueError (``lora.target_modules: why``) when LoRA target modules name expert
    projections of an MoE model (``experts`` routed experts per layer; 0: a dense model).
    transformers keeps the experts as fused 3-D tensors, not linear layers, so LoRA cannot
    adapt them, and a list naming them would leave every expert silently untouched. The
    default list is accepted: it means every linear projection the model has, which on an
    MoE model is the attention projections (and the MLP projections of dense layers, if any)."""
    if experts == 0 or set(targets) == set(LORA_TARGETS):
        return
    named = sorted(set(targets) & EXPERT_TARGETS)
    if named:
        raise ValueError(
            f"lora.target_modules: {', '.join(named)}: LoRA cannot adapt the experts of the MoE model {model} "
            "(fused experts are not supported); it adapts the attention projections (and dense MLP layers if "
            "any): list attention projections only (q_proj, k_proj, v_proj, o_proj), or leave target_modules unset"
        )


class GCConfig(PrlModel):
    """Manual Python garbage collection in the trainer."""

    interval: Annotated[int, Field(ge=1)] = 50
    """Collect every N steps (automatic collection stays off between them)."""


class ModelTrainConfig(TrainerModelConfig):
    """The trained model and how it is laid out."""

    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Parameter dtype; auto is bfloat16 on GPU and float32 on CPU."""
    activation_checkpointing: bool = False
    """Recompute activations in the backward pass."""
    activation_checkpointing_freq: Annotated[int, Field(ge=1)] = 1
    """With activation_checkpointing: recompute every N-th decoder layer only (1: all of
    them). Layers in between keep their activations: less recompute, more memory."""
    optim_cpu_offload: bool = False
    """Keep the optimizer state (AdamW moments) in host memory; a no-op on CPU-only runs.
    Off by default, as in the reference: it saves GPU memory (8 bytes per parameter) at the
    cost of a host round trip per step (0.15-0.19 s at 0.6B), a third of an SFT step."""
    full_offload: bool = False
    """Keep gradients, fp32 master weights and optimizer state in host memory and run the
    optimizer step inside the backward (adamw or signsgd; gradient clipping off, one warning)."""
    attn_implementation: str = "auto"
    """transformers attention implementation (sdpa, flex_attention, ...), or auto: prl_varlen
    (flash attention over the packed documents, no mask) on CUDA with torch >= 2.10, else sdpa."""
    matmul_precision: Literal["highest", "high", "medium"] = "highest"
    """float32 matmul precision (torch.set_float32_matmul_precision): high or medium let
    float32 matmuls use TF32 / bfloat16 tensor cores."""
    gc: GCConfig | None = None
    """Manual Python garbage collection (optional; unset, Python collects automatically).
    [model.gc] turns automatic collection off and collects every interval steps, on every
    rank at the same step."""
    dp_replicate: Annotated[int, Field(ge=1)] = 1
    """Data-parallel replicas (HSDP): each holds a full copy of the sharded model."""
    dp_shard: Annotated[int, Field(ge=-1)] = -1
    """Ranks each replica shards the model over (FSDP2); -1: world size / dp_replicate."""
    tp: Annotated[int, Field(ge=1)] = 1
    """Tensor-parallel degree (only 1: not supported yet)."""
    cp: Annotated[int, Field(ge=1)] = 1
    """Context-parallel degree (only 1: not supported yet)."""
    ep: Annotated[int, Field(ge=1)] = 1
    """Expert-parallel degree of an MoE model: each group of ep consecutive ranks splits every
    MoE layer's experts between its members (num_experts / ep each) and sends tokens to the
    rank that holds their expert (all-to-all). Must divide the number of workers and the
    number of experts; everything else stays sharded as dp_replicate x dp_shard say."""
    freeze_moe_router: bool | Literal["auto"] = "auto"
    """Freeze the router (gate) weights of an MoE model: no gradient, not in the optimizer.
    auto: frozen in RL (a router update moves the trainer's expert choices away from those
    inference sampled with), trained in SFT. true on a dense model is an error."""
    routing_replay: bool = False
    """prl rl on an MoE model: route each sampled token's prediction to the experts the
    inference server's routers chose for it (the router still computes its logits and
    weights) instead of the trainer's own top k, so trainer and sampler use the same experts
    (docs/moe.md, routing replay). Needs an [inference] backend that returns routed experts
    (torch); true on a dense model is an error."""

    @model_validator(mode="after")
    def _parallel(self) -> ModelTrainConfig:
        for name in ("tp", "cp"):
            if getattr(self, name) > 1:
                kind = "tensor" if name == "tp" else "context"
                raise ValueError(f"{name} = {getattr(self, name)}: {kind} parallelism is not supported yet (use 1)")
        if self.dp_shard == 0:
            raise ValueError("dp_shard must be -1 (the rest of the world) or at least 1")
        return self

    def check_model(self, model_dir: str) -> None:
        """freeze_moe_router = true, routing_replay and ep > 1 need a model with routed
        experts (and ep must divide their number), [model.lora] target modules must not name
        an MoE model's experts, [model.vlm] needs a registered vision-language model class
        (all read from its config.json)."""
        if (
            self.freeze_moe_router is not True
            and not self.routing_replay
            and self.ep == 1
            and self.vlm is None
            and self.lora is None
        ):
            return
        path = Path(model_dir) / "config.json"
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError):
            return  # no readable config here: the trainer checks the loaded model itself
        experts = config_experts(config)
        if experts == 0 and self.freeze_moe_router is True:
            raise ValueError(f"freeze_moe_router: {self.name} has no MoE router (its config.json names no experts)")
        if experts == 0 and self.routing_replay:
            raise ValueError(f"routing_replay: {self.name} is a dense model (its config.json names no experts)")
        if self.ep > 1:
            check_ep(self.ep, experts, self.name)
        if self.lora is not None:
            check_lora_experts(self.lora.target_modules, experts, self.name)
        if self.vlm is not None:
            check_vlm(self.vlm, self.name, Path(model_dir), config)

    def replays_routing(self) -> bool:
        """``routing_replay``: prl rl checks that the inference backend returns the experts."""
        return self.routing_replay

    def data_parallel(self, world: int) -> tuple[int, int]:
        """(replicas, shards per replica) for ``world`` ranks; ValueError when they do not
        multiply to it, ConfigError when ``ep`` does not divide it."""
        if world % self.ep:
            # not a ValueError: pydantic would wrap it in its multi-line report
            raise ConfigError(f"model.ep: {self.ep} does not divide the {world} trainer workers (num_workers)")
        shard = self.dp_shard if self.dp_shard != -1 else world // self.dp_replicate
        if self.dp_replicate * shard != world or shard < 1:
            raise ValueError(
                f"model.dp_replicate ({self.dp_replicate}) x model.dp_shard ({self.dp_shard}) must equal "
                f"the number of workers ({world})"
            )
        return self.dp_replicate, shard

    def param_dtype(self, gpus: bool) -> str:
        if self.dtype == "auto":
            return "bfloat16" if gpus else "float32"
        return self.dtype

    def checkpointed_layers(self, layers: int) -> int:
        # every activation_checkpointing_freq-th layer, the first one included
        return -(-layers // self.activation_checkpointing_freq) if self.activation_checkpointing else 0


class OptimConfig(TrainerOptimConfig):
    """Optimizer."""

    type: Literal["adamw", "sgd", "signsgd"] = "adamw"
    """Optimizer type (signsgd: lr · sign(gradient), decoupled weight decay)."""
    lr: Annotated[float, Field(gt=0)] = 1e-6
    """Peak learning rate."""
    weight_decay: float | Literal["auto"] = "auto"
    """Weight decay; "auto" is 0.0 for RL and 0.01 for SFT."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    max_norm: Annotated[float, Field(gt=0)] = 1.0
    """Clip the global gradient norm to this."""

    def state_per_param(self) -> int:
        return 2 if self.type == "adamw" else 0


class SchedulerConfig(TrainerSchedulerConfig):
    """Learning-rate schedule."""

    type: Literal["constant", "linear", "cosine"] = "constant"
    """constant, linear (warmup then linear decay) or cosine (warmup then cosine)."""
    warmup_steps: Annotated[int, Field(ge=0)] = 10
    """Linear warmup steps (linear and cosine)."""
    decay_steps: Annotated[int, Field(ge=0)] = 10
    """Linear decay steps at the end of training (linear)."""
    min_lr_ratio: Annotated[float, Field(ge=0, le=1)] = 0.0
    """Final lr as a fraction of the peak."""


class SFTLossConfig(TrainerSFTLossConfig):
    """The SFT loss: the mean negative log-likelihood per loss token over the global batch
    (tokens of the roles in data.loss_mask; the same whatever the number of workers)."""

    type: Literal["sft"] = "sft"
    """Masked NLL, the only SFT loss (RL losses are [trainer.loss] of prl rl)."""
