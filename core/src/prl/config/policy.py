"""The policy model's config, and the sections of ``[trainer]`` a trainer plugin owns.

Core reads only a few things of the trained model (its name, LoRA, seq_len) and of the
optimizer; everything else under ``trainer.model``, ``trainer.optim`` and
``trainer.scheduler`` (``prl sft``: ``model``, ``optim``, ``scheduler`` and ``loss``) is
the trainer plugin's. A plugin declares its classes on its :class:`prl.contracts.trainer.Trainer`
(``ModelConfig``, ``OptimConfig``, ``SchedulerConfig``, ``SFTLossConfig``), subclassing the bases here, and
:class:`prl.config.trainer_sections.TrainerSection` composes them into the root configs
from the registry, so the user's paths and flags stay ``trainer.model.<field>`` whatever
trainer defines them.

This module imports nothing but the config base: the trainer contract imports it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from prl.config.base import PrlModel

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LoraConfig(PrlModel):
    """LoRA: train low-rank adapters on the target linear layers; the base stays frozen."""

    rank: Annotated[int, Field(ge=1)] = 16
    """Adapter rank r (A is r x in, B is out x r)."""
    alpha: Annotated[float, Field(gt=0)] = 32.0
    """Scale numerator: the adapter's output is multiplied by alpha / rank."""
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    """Dropout on the adapter's input while training."""
    target_modules: Annotated[list[str], Field(min_length=1)] = Field(default_factory=lambda: list(LORA_TARGETS))
    """Linear layers that get an adapter, by the last part of their module name. An MoE
    model's fused experts are not linear layers: naming them is refused (docs/moe.md)."""
    name: Annotated[str, Field(min_length=1)] = "prl-lora"
    """Name the adapter is served under; RL requests ask for it as their model."""


class VLMConfig(PrlModel):
    """A vision-language model: images in the chat reach its vision tower. The section
    being present turns it on; ``model.vlm = true`` is shorthand for its defaults."""

    freeze_vision_encoder: bool = True
    """Keep the vision tower (patch embedding, blocks and merger) frozen: no gradient, not
    in the optimizer. false trains it with the language model."""
    max_pixels: Annotated[int, Field(ge=1)] | None = None
    """Largest image area in pixels after resizing; larger images are scaled down, keeping
    their aspect ratio. Unset: the model's image processor's own limit."""
    min_pixels: Annotated[int, Field(ge=1)] | None = None
    """Smallest image area in pixels; smaller images are scaled up. Unset: the processor's."""

    @model_validator(mode="after")
    def _pixels(self) -> VLMConfig:
        if self.min_pixels and self.max_pixels and self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) must not exceed max_pixels ({self.max_pixels})")
        return self


class ModelConfig(PrlModel):
    """The policy model."""

    name: str = "Qwen/Qwen3-0.6B"
    """HF model id or local model directory."""
    vlm: VLMConfig | None = None
    """Vision-language model settings ([model.vlm]; ``true`` for the defaults). Unset, a
    vision-language model is trained on text only."""

    @field_validator("vlm", mode="before")
    @classmethod
    def _vlm_shorthand(cls, value: object) -> object:
        # The bool the field used to be: true is the default section, false none.
        if isinstance(value, bool):
            return {} if value else None
        return value


class PolicyModelConfig(ModelConfig):
    """The policy model that is trained (and, in RL, served while it trains)."""

    lora: LoraConfig | None = None
    """Train (and serve) a LoRA adapter instead of the full weights (optional; [model.lora])."""


class TrainerModelConfig(PolicyModelConfig):
    """The trained model: what core reads of it. A trainer plugin subclasses this with its
    own layout settings (dtype, sharding, attention, ...)."""

    seq_len: Annotated[int, Field(ge=8)] = 2048
    """Longest packed sequence per micro-batch."""

    def check_model(self, model_dir: str) -> None:
        """Check these settings against the model's own files in ``model_dir`` (its local
        directory or cached snapshot), at resolve time before any process starts; raise
        ValueError as ``<field>: why`` (the field under this section). The base checks
        nothing."""

    def replays_routing(self) -> bool:
        """True when the trainer routes an MoE model's tokens with the experts the
        inference server recorded (routing replay): the run's inference backend must return
        them (``InferenceBackendConfig.returns_routed_experts``). The base never does."""
        return False

    def data_parallel(self, world: int) -> tuple[int, int]:
        """(replicas, shards per replica) for ``world`` ranks; ValueError when this layout
        cannot use that many. The base replicates the model on every rank."""
        return world, 1

    def param_dtype(self, gpus: bool) -> str:
        """Name of the dtype parameters are trained in (``prl rl --explain``, ``prl doctor``)."""
        return "bfloat16" if gpus else "float32"

    def checkpointed_layers(self, layers: int) -> int:
        """How many of ``layers`` decoder layers recompute their activations in the backward
        (memory estimate of ``--explain``)."""
        return 0


class TrainerOptimConfig(PrlModel):
    """Optimizer settings: a trainer plugin subclasses this with its own."""

    def state_per_param(self) -> int:
        """Optimizer values kept per parameter (AdamW: 2), for size estimates."""
        return 0


class TrainerSchedulerConfig(PrlModel):
    """Learning-rate schedule settings: a trainer plugin subclasses this with its own."""


class TrainerSFTLossConfig(PrlModel):
    """The SFT loss's settings (``prl sft``'s ``[loss]``): a trainer plugin subclasses this
    with its own; core reads none of them."""
