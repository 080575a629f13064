"""Root configs of the entry points: RLConfig, SFTConfig, EvalConfig."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, model_serializer, model_validator

from prl.config.base import PrlModel
from prl.config.components import (
    ComponentMonitors,
    InferenceConfig,
    OrchestratorConfig,
    SourceConfig,
    TrainerConfig,
    _monitors,
    expand_backend_section,
)
from prl.config.errors import ConfigError
from prl.config.launcher_sections import launcher_section, pick_launcher
from prl.config.monitors import MonitorsSection, check_run_wide
from prl.config.propagate import fill_shared, record_inherited, release_inherited
from prl.config.replay import check_routing_replay, check_sampling_replay
from prl.config.sections import (
    CkptConfig,
    ClientConfig,
    ConcurrencyConfig,
    EnvVars,
    LogConfig,
    ModelConfig,
    PartialSamplingConfig,
    PolicyModelConfig,
    RendererField,
    ResumeConfig,
    RolloutTransportConfig,
    RunConfig,
    TokenizerConfig,
    WeightBroadcastField,
    _default_plugin,
    _default_tag,
    default_output_dir,
)
from prl.config.sft_eval import SFTEvalConfig, check_sft_eval, fill_inference_model
from prl.config.trainer_sections import (
    TrainerModel,
    TrainerOptim,
    TrainerScheduler,
    TrainerSFTLoss,
    check_selected,
    trainer_default,
)
from prl.config.unions import PluginConfig

SharedMonitors = Annotated[PrlModel, MonitorsSection(component=False)]


_LAUNCHERS = PluginConfig["launchers"]
_SLURM = launcher_section("slurm")


class CommonRunFields(PrlModel):
    """Fields every launched entry point shares."""

    output_dir: Path = Field(default_factory=default_output_dir)
    """Root of run directories ($PRL_OUTPUT_DIR or outputs)."""
    run: RunConfig = Field(default_factory=RunConfig)
    """Run identity."""
    clean: bool = False
    """Delete the run directory first (only inside output_dir; ignored when NEVER_CLEAN is set)."""
    log: LogConfig = Field(default_factory=LogConfig)
    """Logging."""
    env_vars: EnvVars = {}
    """Environment variables exported to every child process."""
    dashboard: bool = True
    """Accepted from prime-rl configs; changes nothing: ``prl dashboard`` finds runs by reading
    the output directories it is given, so a run needs no registering."""
    dry_run: bool = False
    """Resolve, validate and write the run's configs, then stop."""
    deployment: _LAUNCHERS = Field(default_factory=lambda: _default_plugin("launchers"))
    """Launcher, selected by ``type`` (local, slurm; the reference's single_node and
    multi_node are accepted too)."""
    slurm: _SLURM = None
    """SLURM settings (optional; setting it submits through the slurm launcher)."""

    @model_validator(mode="before")
    @classmethod
    def _deployment_spelling(cls, data: Any) -> Any:
        return pick_launcher(data, cls) if isinstance(data, dict) else data


class RLConfig(CommonRunFields):
    """prl rl: inference, env servers, orchestrator and trainer as one run."""

    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    """Trainer."""
    orchestrator: OrchestratorConfig = Field(default_factory=OrchestratorConfig)
    """Orchestrator."""
    inference: InferenceConfig | None = Field(default_factory=InferenceConfig)
    """Managed inference server (optional, enabled by default; None means none is started)."""
    ckpt: CkptConfig | None = None
    """Checkpointing, shared by trainer and orchestrator (optional)."""
    resume: ResumeConfig | None = None
    """Resume, copied over trainer and orchestrator (optional)."""
    monitors: SharedMonitors = Field(default_factory=lambda: _monitors(False))
    """Metric sinks propagated to trainer and orchestrator."""
    model: PolicyModelConfig = Field(default_factory=PolicyModelConfig)
    """Policy model (shared)."""
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    """Tokenizer (shared)."""
    max_steps: Annotated[int, Field(ge=1)] | None = None
    """Total steps (shared); on resume this is the total target."""
    seq_len: Annotated[int, Field(ge=8)] | None = None
    """Sequence length (shared): trainer.model.seq_len and orchestrator.seq_len."""
    weight_broadcast: WeightBroadcastField
    """Weight transport, copied to every component."""
    rollout_transport: RolloutTransportConfig = Field(default_factory=RolloutTransportConfig)
    """Batch transport (shared)."""

    # Component values a shared setting filled: the dump (rl.json) records them, so that
    # reloading it with a shared value changed fills them from the new value.
    _inherited: list[tuple[str, ...]] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _propagate(cls, data: Any, handler: Any) -> Any:
        if not isinstance(data, dict):
            return handler(data)
        data = release_inherited(data, cls)
        if isinstance(data.get("inference"), dict):
            # [inference.vllm] model = ... is an explicit inference.model.name, so it is
            # folded in before the shared model.name fills only what is left unset.
            data = {**data, "inference": expand_backend_section(data["inference"])}
        data, inherited = fill_shared(_lora_transport(_train_workers(data)), cls)
        config = handler(data)
        config._inherited = inherited
        return config

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        return record_inherited(handler(self), self._inherited)

    @model_validator(mode="after")
    def _cross_checks(self) -> RLConfig:
        t, o = self.trainer, self.orchestrator
        check_run_wide(t, o)
        if (t.ckpt is None) != (o.ckpt is None):
            raise ValueError("trainer.ckpt and orchestrator.ckpt must be both set or both unset")
        if t.ckpt and o.ckpt and t.ckpt.interval != o.ckpt.interval:
            raise ValueError("trainer.ckpt.interval and orchestrator.ckpt.interval must be equal")
        if t.max_steps != o.max_steps:
            raise ValueError(f"max_steps differ: trainer {t.max_steps}, orchestrator {o.max_steps}")
        if t.model.seq_len < o.seq_len:
            raise ValueError(
                f"trainer.model.seq_len ({t.model.seq_len}) must be at least orchestrator.seq_len ({o.seq_len})"
            )
        if self.inference is not None and self.inference.model.name != o.model.name:
            raise ValueError(
                f"orchestrator.model.name '{o.model.name}' differs from "
                f"inference.model.name '{self.inference.model.name}'"
            )
        templates = {t.tokenizer.chat_template, o.tokenizer.chat_template}
        if self.inference is not None:
            templates.add(self.inference.tokenizer.chat_template)
        if len(templates) > 1:
            raise ValueError("tokenizer.chat_template must be identical in every component")
        if o.num_train_workers != t.num_workers:
            raise ValueError(
                f"orchestrator.num_train_workers ({o.num_train_workers}) must equal "
                f"trainer.num_workers ({t.num_workers})"
            )
        _check_lora(self)
        check_sampling_replay(self)
        check_routing_replay(self)
        return self


def _train_workers(data: dict) -> dict:
    """One trainer rank per train GPU of a single-node ``[deployment]`` (torchrun nproc =
    ``num_train_gpus``), filled in before validation, so that the checks that depend on the
    number of ranks (``trainer.model.ep`` and the data-parallel layout must divide it) see
    the ranks the run will have. A config that sets the worker counts itself keeps them."""
    dep = data.get("deployment")
    try:  # command-line values arrive as text; a bad one is the launcher's field to report
        gpus = int(dep.get("num_train_gpus") or 0) if isinstance(dep, dict) else 0
    except (TypeError, ValueError):
        return data
    if gpus <= 1 or dep.get("num_train_nodes"):
        return data
    trainer, orch = data.get("trainer") or {}, data.get("orchestrator") or {}
    if not isinstance(trainer, dict) or not isinstance(orch, dict):
        return data
    if "num_workers" in trainer or "num_train_workers" in orch:
        return data
    return {**data, "trainer": {**trainer, "num_workers": gpus}, "orchestrator": {**orch, "num_train_workers": gpus}}


def _lora_transport(data: dict) -> dict:
    """A LoRA run without ``[weight_broadcast]`` uses an installed transport that carries
    adapters (filesystem) even when the installed default cannot."""
    model = data.get("model")
    if not isinstance(model, dict) or model.get("lora") is None or "weight_broadcast" in data:
        return data
    from prl.plugins import get_registry

    registry = get_registry()
    classes = registry.classes("weight_transports")
    default = registry.default_tag("weight_transports")
    tags = [t for t, c in classes.items() if getattr(c.Config, "carries_adapters", False)]
    if not tags or default in tags:
        return data  # the default carries them, or none does (_check_lora says so)
    return {**data, "weight_broadcast": {"type": tags[0]}}


def _check_lora(cfg: RLConfig) -> None:
    """LoRA is set once under [model.lora] and needs a transport that carries adapters
    (ConfigError, not ValueError: one line naming the field, not a validation report)."""
    t, o = cfg.trainer, cfg.orchestrator
    if t.model.lora != o.model.lora:
        raise ConfigError("model.lora: set LoRA once under [model.lora] so trainer and orchestrator agree")
    lora = t.model.lora
    if lora is None:
        return
    if not getattr(type(cfg.weight_broadcast), "carries_adapters", False):
        raise ConfigError(
            f"weight_broadcast.type '{cfg.weight_broadcast.type}' cannot carry LoRA adapters: "
            'use type = "filesystem" or leave [weight_broadcast] unset'
        )
    if lora.name == o.model.name:
        raise ConfigError(f"model.lora.name '{lora.name}' must differ from the base model's name")


class SFTDataConfig(PrlModel):
    """SFT dataset."""

    type: Literal["sft", "fake"] = "sft"
    """sft: a dataset; fake: random tokens for benchmarking."""
    name: str = "PrimeIntellect/Reverse-Text-SFT"
    """HF dataset id, a local jsonl/parquet file or a saved dataset directory."""
    revision: str | None = None
    """Dataset revision."""
    subsets: list[str] | None = None
    """Subsets to interleave."""
    splits: list[str] | None = None
    """Splits to interleave."""
    probabilities: list[float] | None = None
    """Interleaving probabilities."""
    stopping_strategy: Literal["all_exhausted", "first_exhausted"] = "all_exhausted"
    """When interleaving stops."""
    shuffle: bool = True
    """Reshuffle each epoch with seed + epoch."""
    seed: int = 0
    """Shuffle seed."""
    batch_size: Annotated[int, Field(ge=1)] = 128
    """Packed rows per step (global)."""
    seq_len: Annotated[int, Field(ge=8)] = 128
    """Length of each packed row."""
    micro_batch_size: Annotated[int, Field(ge=1)] = 1
    """Rows per forward pass."""
    num_workers: Annotated[int, Field(ge=0)] = 1
    """Background tokenisation workers."""
    columns: dict[str, Any] = {}
    """Rename columns: messages, prompt, completion, tools, renderer = {field = column}."""
    loss_mask: dict[str, bool] = {"system": False, "user": False, "assistant": True, "tool": False}
    """Roles trained on."""

    @model_validator(mode="after")
    def _check(self) -> SFTDataConfig:
        if self.batch_size % self.micro_batch_size:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be divisible by micro_batch_size ({self.micro_batch_size})"
            )
        lists = {k: getattr(self, k) for k in ("subsets", "splits", "probabilities") if getattr(self, k)}
        if len({len(v) for v in lists.values()}) > 1:
            raise ValueError("subsets, splits and probabilities must have the same length")
        return self


class ValConfig(PrlModel):
    """Validation during SFT."""

    interval: Annotated[int, Field(ge=1)] = 50
    """Validate every N steps."""
    eval_on_start: bool = False
    """Validate before the first step."""
    data: SFTDataConfig = Field(default_factory=SFTDataConfig)
    """Validation data."""


class SFTConfig(CommonRunFields):
    """prl sft: supervised fine-tuning."""

    trainer_type: str = Field(default_factory=lambda: _default_tag("trainers"))
    """Trainer plugin (the installed default trainer when not given)."""
    model: TrainerModel = trainer_default("model")
    """Model."""
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    """Tokenizer."""
    renderer: RendererField
    """Renderer, selected by ``name``."""
    data: SFTDataConfig = Field(default_factory=SFTDataConfig)
    """Training data."""
    val: ValConfig | None = None
    """Validation (optional)."""
    optim: TrainerOptim = trainer_default("optim")
    """Optimizer."""
    scheduler: TrainerScheduler = trainer_default("scheduler")
    """Learning-rate schedule."""
    loss: TrainerSFTLoss = trainer_default("loss")
    """Loss."""
    ckpt: CkptConfig | None = None
    """Checkpointing (optional)."""
    resume: ResumeConfig | None = None
    """Resume (optional)."""
    monitors: ComponentMonitors = Field(default_factory=lambda: _monitors(True))
    """Metric sinks."""
    max_steps: Annotated[int, Field(ge=1)] | None = None
    """Total steps; None runs one epoch."""
    num_workers: Annotated[int, Field(ge=1)] = 1
    """Data-parallel processes; above 1 prl sft starts torchrun itself."""
    seed: int = 0
    """Seed."""
    eval: SFTEvalConfig | None = None
    """Online evaluation of the trained weights (optional)."""
    inference: InferenceConfig | None = None
    """Managed inference server for online eval (optional; needs [eval])."""
    weight_broadcast: WeightBroadcastField
    """Weight transport from the trainer to inference (used with [eval])."""

    @model_validator(mode="before")
    @classmethod
    def _inference_model(cls, data: Any) -> Any:
        return fill_inference_model(data)

    @model_validator(mode="after")
    def _eval_checks(self) -> SFTConfig:
        check_sft_eval(self.inference, self.eval, self.model.name)
        if self.model.vlm is not None and (self.eval is not None or self.model.lora is not None):
            what = "online eval ([eval])" if self.eval is not None else "LoRA ([model.lora])"
            raise ValueError(f"model.vlm: {what} of a vision-language run is not supported yet")
        if self.model.lora is not None and self.eval is not None:
            raise ValueError(
                "model.lora: online eval ([eval]) of a LoRA run is not supported yet; "
                "evaluate an export made with prl export --merge-lora"
            )
        sections = {"model": self.model, "optim": self.optim, "scheduler": self.scheduler, "loss": self.loss}
        check_selected(self.trainer_type, sections)
        self.model.data_parallel(self.num_workers)
        return self


class EvalConfig(CommonRunFields):
    """prl eval: one epoch per source against a running inference server."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    """Model name sent to the server."""
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    """Tokenizer for rendering."""
    renderer: RendererField
    """Renderer, selected by ``name``."""
    client: ClientConfig = Field(default_factory=ClientConfig)
    """Inference endpoint."""
    num_examples: Annotated[int, Field(ge=1)] | None = None
    """Examples per source (-n); None uses all."""
    group_size: Annotated[int, Field(ge=1)] = 1
    """Rollouts per example (-r), for pass@k."""
    concurrency: ConcurrencyConfig = Field(default_factory=lambda: ConcurrencyConfig(min_inflight=32, max_inflight=32))
    """In-flight band (-c pins both)."""
    sampling: PartialSamplingConfig = Field(default_factory=PartialSamplingConfig)
    """Sampling; unset fields use server defaults."""
    source: list[SourceConfig] = []
    """Eval sources ([[source]])."""
    ckpt: CkptConfig | None = Field(default_factory=lambda: CkptConfig(interval=1, keep_last=1))
    """Cursor checkpoints every N completed groups (optional, enabled by default)."""
    resume: ResumeConfig | None = None
    """Resume from a cursor checkpoint (optional)."""
    monitors: ComponentMonitors = Field(default_factory=lambda: _monitors(True))
    """Metric sinks."""
