"""Root configs of the components a run starts: orchestrator, trainer, inference."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from prl.config.base import PrlModel
from prl.config.launcher_sections import launcher_section
from prl.config.monitors import MonitorsSection
from prl.config.propagate import Shared, SharedFields, SharedSection
from prl.config.sections import (
    CkptConfig,
    ClientConfig,
    ConcurrencyConfig,
    EnvVars,
    LogConfig,
    PartialSamplingConfig,
    PolicyModelConfig,
    RendererField,
    ResumeConfig,
    RolloutTransportConfig,
    RunConfig,
    SamplingConfig,
    TokenizerConfig,
    WeightBroadcastField,
    _default_plugin,
    _default_tag,
    default_output_dir,
)
from prl.config.trainer_sections import TrainerModel, TrainerOptim, TrainerScheduler, check_selected, trainer_default
from prl.config.unions import PluginConfig
from prl.config.watchdog import WatchdogConfig

ComponentMonitors = Annotated[PrlModel, MonitorsSection(component=True)]
# Plugin unions as module-level aliases: a subscript with a string inside an annotation reads
# as a forward reference to linters.
_TASKSETS = PluginConfig["tasksets"]
_ALGORITHMS = PluginConfig["algorithms"]
_LOSSES = PluginConfig["losses"]
_INFERENCE_BACKENDS = PluginConfig["inference_backends"]
_SLURM = launcher_section("slurm")

# The settings prl rl shares (RLConfig's top-level fields), declared on the component fields
# that follow them (prl.config.propagate).
_MODEL_NAME = {"name": "model.name", "lora": "model.lora"}
_MODEL = SharedFields({**_MODEL_NAME, "vlm": "model.vlm"})
_TRAINER_MODEL = SharedFields({**_MODEL_NAME, "vlm": "model.vlm", "seq_len": "seq_len"})
# the server widens image placeholders with [model.vlm]'s pixel bounds, as the trainer does
_INFERENCE_MODEL = SharedFields({**_MODEL_NAME, "vlm": "model.vlm"})
_CHAT_TEMPLATE = SharedFields({"chat_template": "tokenizer.chat_template"})
_TOKENIZER = SharedFields({f: f"tokenizer.{f}" for f in ("name", "trust_remote_code", "chat_template")})
_LOG = SharedFields({f: f"log.{f}" for f in ("level", "json_logging")})
_TRANSPORT = SharedFields({f: f"rollout_transport.{f}" for f in ("type", "host", "port", "hwm")})
_MONITORS = SharedSection("monitors", per_key=True)
_CKPT = SharedSection("ckpt", only=("output_dir", "interval", "keep_last", "keep_interval"))


class HarnessConfig(PrlModel):
    """The agent harness that drives the model inside an environment."""

    id: str = "null"
    """Harness id ("null": the model answers directly)."""
    args: dict = {}
    """Harness-specific settings."""


class RuntimeConfig(PrlModel):
    """Where the agent program runs."""

    type: str = "subprocess"
    """Runtime type ("subprocess" runs locally without credentials)."""
    args: dict = {}
    """Runtime-specific settings."""


class AgentConfig(PrlModel):
    """Agent: harness and runtime."""

    harness: HarnessConfig = Field(default_factory=HarnessConfig)
    """Agent harness."""
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    """Agent runtime."""


class ServeConfig(PrlModel):
    """How the env server of a source is reached."""

    address: str | None = None
    """host:port of an env server managed elsewhere; None spawns one."""
    isolate: bool = False
    """Run an in-process taskset in its own spawned env server too, so task code that
    crashes or leaks cannot take the orchestrator down."""
    startup_timeout: Annotated[float, Field(gt=0)] = 300.0
    """Seconds to wait for a spawned env server to publish its address."""


class EnvConfig(PrlModel):
    """An environment: taskset, agent and serving."""

    taskset: _TASKSETS
    """Taskset, selected by ``id``."""
    agent: AgentConfig = Field(default_factory=AgentConfig)
    """Agent harness and runtime."""
    serve: ServeConfig = Field(default_factory=ServeConfig)
    """Env server address or spawn settings."""
    timeout: Annotated[float, Field(gt=0)] = 600.0
    """Seconds one rollout may take before it is recorded as timed out."""
    on_failure: Literal["continue", "stop"] = "continue"
    """When the env server dies: keep training on the other sources, or stop the run."""


class SamplerConfig(PrlModel):
    """Curriculum sampler of a source."""

    type: Literal["standard", "difficulty_pool"] = "standard"
    """standard: shuffled epochs; difficulty_pool: favour tasks with mixed outcomes."""
    seed: int = 0
    """Sampler seed."""
    min_mean_reward: float | None = None
    """Admission gate: a finished group whose mean reward is below this is not trained on
    (too hard for now); None admits every group."""
    max_mean_reward: float | None = None
    """Admission gate: a finished group whose mean reward is above this is not trained on
    (already solved); None admits every group."""

    @model_validator(mode="after")
    def _gate_order(self) -> SamplerConfig:
        low, high = self.min_mean_reward, self.max_mean_reward
        if low is not None and high is not None and low > high:
            raise ValueError(f"min_mean_reward ({low}) must not exceed max_mean_reward ({high})")
        return self

    def admits(self, rewards: list[float]) -> bool:
        """Whether a finished group with these rewards passes the admission gates."""
        if not rewards:
            return True
        mean = sum(rewards) / len(rewards)
        low, high = self.min_mean_reward, self.max_mean_reward
        return (low is None or mean >= low) and (high is None or mean <= high)


class SelectConfig(PrlModel):
    """Which examples of a taskset are used."""

    limit: Annotated[int, Field(ge=1)] | None = None
    """Use at most this many examples."""
    shuffle: bool = False
    """Shuffle before limiting."""
    skip: Annotated[int, Field(ge=0)] = 0
    """Skip the first N examples."""
    include: list[str] | None = None
    """Only these examples, by task id (the ``group`` column of results/<env>.jsonl); None: all."""
    exclude: list[str] = []
    """Leave out these examples, by task id."""


class SourceConfig(PrlModel):
    """One train or eval source."""

    name: str
    """Source name (metrics, logs, env server files)."""
    env: EnvConfig
    """Environment of this source."""
    ratio: Annotated[float, Field(gt=0)] = 1.0
    """Relative probability of picking this source."""
    group_size: Annotated[int, Field(ge=1)] | None = None
    """Rollouts per task; inherits the group's group_size."""
    sampling: PartialSamplingConfig = Field(default_factory=PartialSamplingConfig)
    """Sampling overrides for this source."""
    algo: _ALGORITHMS | None = None
    """Algorithm override; inherits the group's algo."""
    sampler: SamplerConfig = Field(default_factory=SamplerConfig)
    """Curriculum sampler."""
    select: SelectConfig = Field(default_factory=SelectConfig)
    """Example selection."""
    min_abs_advantage: Annotated[float, Field(ge=0)] = 0.0
    """RL tokens whose |advantage| is at most this leave the RL loss."""


class TrainGroupConfig(PrlModel):
    """Training sources and their shared defaults."""

    group_size: Annotated[int, Field(ge=1)] = 1
    """Rollouts per task (at least 8 is recommended for GRPO)."""
    algo: _ALGORITHMS = Field(default_factory=lambda: _default_plugin("algorithms"))
    """Algorithm, selected by ``type``."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    """Sampling for training rollouts."""
    source: list[SourceConfig] = []
    """Train sources ([[orchestrator.train.source]])."""

    @model_validator(mode="after")
    def _unique(self) -> TrainGroupConfig:
        names = [s.name for s in self.source]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"source names must be unique, repeated: {', '.join(dup)}")
        return self


class EvalGroupConfig(PrlModel):
    """Evaluations during training."""

    interval: Annotated[int, Field(ge=1)] = 100
    """Evaluate every N steps."""
    group_size: Annotated[int, Field(ge=1)] = 1
    """Rollouts per example (for pass@k)."""
    num_examples: Annotated[int, Field(ge=1)] | None = None
    """Examples per source; None uses all."""
    sampling: PartialSamplingConfig = Field(default_factory=PartialSamplingConfig)
    """Eval sampling; unset fields use server defaults."""
    select: SelectConfig = Field(default_factory=SelectConfig)
    """Example selection of every source; the fields a source sets itself win."""
    source: list[SourceConfig] = []
    """Eval sources; group_size, sampling and select fall back to the group's."""

    @model_validator(mode="after")
    def _fill_sources(self) -> EvalGroupConfig:
        # Written into each source, so resolved configs show the values it really uses.
        from prl.config.eval_defaults import fill_source

        self.source = [fill_source(self, s) for s in self.source]
        return self


class OrchestratorConfig(PrlModel):
    """The orchestrator: dispatch, scoring, off-policy control, packing (no torch)."""

    model: Annotated[PolicyModelConfig, _MODEL] = Field(default_factory=PolicyModelConfig)
    """Policy model served by inference."""
    tokenizer: Annotated[TokenizerConfig, _TOKENIZER] = Field(default_factory=TokenizerConfig)
    """Tokenizer for rendering."""
    renderer: RendererField
    """Renderer for rollouts, selected by ``name``."""
    client: ClientConfig = Field(default_factory=ClientConfig)
    """Inference endpoint."""
    seq_len: Annotated[int, Field(ge=8), Shared("seq_len")] = 2048
    """Longest packed micro-batch, in tokens."""
    batch_size: Annotated[int, Field(ge=1)] = 128
    """Samples per step; divisible by every source's group_size."""
    constant_trainer_batch_size: bool = True
    """Replace dropped samples so every step trains exactly batch_size samples."""
    max_off_policy_steps: Annotated[int, Field(ge=0)] = 8
    """Largest allowed gap between training step and dispatch version."""
    deterministic: bool = False
    """Reproducible runs: batch S is sampled only on the weights of step S-1 (as with
    max_off_policy_steps = 0) and each episode's sampling seed comes from (seed, step, group,
    episode), so a resumed run repeats an uninterrupted one. Inference idles while the
    trainer steps."""
    num_train_workers: Annotated[int, Field(ge=1)] = 1
    """Data-parallel trainer ranks to pack for."""
    train: TrainGroupConfig = Field(default_factory=TrainGroupConfig)
    """Training sources."""
    eval: EvalGroupConfig | None = None
    """Evaluations during training (optional)."""
    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)
    """In-flight rollout band."""
    watchdog: WatchdogConfig = Field(default_factory=WatchdogConfig)
    """Stall watchdog: one line naming what the run waits on when no step finishes in time."""
    seed: int = 0
    """Seed of source mixing."""
    max_steps: Annotated[Annotated[int, Field(ge=1)] | None, Shared("max_steps")] = None
    """Total steps; None runs until stopped."""
    rollout_transport: Annotated[RolloutTransportConfig, _TRANSPORT] = Field(default_factory=RolloutTransportConfig)
    """Batch transport to the trainer."""
    weight_broadcast: Annotated[WeightBroadcastField, Shared("weight_broadcast", replace=True)]
    """Weight transport from the trainer."""
    ckpt: Annotated[CkptConfig | None, _CKPT] = None
    """Checkpointing (optional)."""
    resume: Annotated[ResumeConfig | None, Shared("resume", replace=True)] = None
    """Resume (optional)."""
    monitors: Annotated[ComponentMonitors, _MONITORS] = Field(default_factory=lambda: _monitors(True))
    """Metric sinks."""
    log: Annotated[LogConfig, _LOG] = Field(default_factory=LogConfig)
    """Logging."""
    output_dir: Annotated[Path, Shared("output_dir")] = Field(default_factory=default_output_dir)
    """Root of run directories."""
    run: Annotated[RunConfig, Shared("run")] = Field(default_factory=RunConfig)
    """Run identity."""
    env_vars: EnvVars = {}
    """Environment variables set in this component's process (over the top-level env_vars)."""

    @model_validator(mode="after")
    def _batch(self) -> OrchestratorConfig:
        for source in self.train.source:
            size = source.group_size or self.train.group_size
            if self.batch_size % size:
                raise ValueError(
                    f"batch_size ({self.batch_size}) must be divisible by the group_size of "
                    f"source '{source.name}' ({size})"
                )
        return self


def _monitors(component: bool):
    section = MonitorsSection(component)
    return section.model()()


class TrainerConfig(PrlModel):
    """The RL trainer."""

    type: str = Field(default_factory=lambda: _default_tag("trainers"))
    """Trainer plugin (the installed default trainer when not given)."""
    model: Annotated[TrainerModel, _TRAINER_MODEL] = trainer_default("model")
    """Model."""
    tokenizer: Annotated[TokenizerConfig, _TOKENIZER] = Field(default_factory=TokenizerConfig)
    """Tokenizer."""
    optim: TrainerOptim = trainer_default("optim")
    """Optimizer."""
    scheduler: TrainerScheduler = trainer_default("scheduler")
    """Learning-rate schedule."""
    loss: _LOSSES = Field(default_factory=lambda: _default_plugin("losses"))
    """Policy loss, selected by ``type``."""
    max_steps: Annotated[Annotated[int, Field(ge=1)] | None, Shared("max_steps")] = None
    """Total steps."""
    num_workers: Annotated[int, Field(ge=1)] = 1
    """Data-parallel processes (torchrun --nproc-per-node)."""
    enable_token_export: bool = False
    """Write per-token training records of every step to <run_dir>/token_exports/step_<S>/rank_<r>.jsonl
    (trainer and sampler logprobs, advantages, masks, entropy), read by the dashboard's trace viewer,
    with each step's exact batch, loss and grad norm, which `prl replay` recomputes a step from."""
    annotations: bool = True
    """Send every trained trace branch's per-token advantages, trainer logprobs, entropies and loss mask
    to the monitors as annotations (monitors/file/annotations/trainer), shown by the dashboard's trace
    viewer; off saves gathering them to rank 0 and writing them on big runs."""
    rollout_transport: Annotated[RolloutTransportConfig, _TRANSPORT] = Field(default_factory=RolloutTransportConfig)
    """Batch transport from the orchestrator."""
    weight_broadcast: Annotated[WeightBroadcastField, Shared("weight_broadcast", replace=True)]
    """Weight transport to inference."""
    ckpt: Annotated[CkptConfig | None, _CKPT] = None
    """Checkpointing (optional)."""
    resume: Annotated[ResumeConfig | None, Shared("resume", replace=True)] = None
    """Resume (optional)."""
    monitors: Annotated[ComponentMonitors, _MONITORS] = Field(default_factory=lambda: _monitors(True))
    """Metric sinks."""
    log: Annotated[LogConfig, _LOG] = Field(default_factory=LogConfig)
    """Logging."""
    output_dir: Annotated[Path, Shared("output_dir")] = Field(default_factory=default_output_dir)
    """Root of run directories."""
    run: Annotated[RunConfig, Shared("run")] = Field(default_factory=RunConfig)
    """Run identity."""
    seed: int = 0
    """Seed."""
    env_vars: EnvVars = {}
    """Environment variables set in this component's process (over the top-level env_vars)."""

    @model_validator(mode="after")
    def _data_parallel(self) -> TrainerConfig:
        check_selected(self.type, {"model": self.model, "optim": self.optim, "scheduler": self.scheduler})
        self.model.data_parallel(self.num_workers)
        return self


class ServerLimitsConfig(PrlModel):
    """What one request, and all requests together, may ask of the inference server.

    A request over a per-request limit is answered 400 (413 for the body) naming the setting.
    """

    max_n: Annotated[int, Field(ge=1)] = 256
    """Most completions one request may ask for: n times its number of prompts."""
    max_prompt_tokens: Annotated[int, Field(ge=1)] | None = None
    """Most tokens in one prompt; None allows up to the context (max_model_len - 1)."""
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    """Most tokens one completion may ask to generate; None allows up to the context."""
    max_body_bytes: Annotated[int, Field(ge=1024)] = 32 * 1024 * 1024
    """Largest request body in bytes (413 above it)."""
    max_tokens_in_flight: Annotated[int, Field(ge=1)] = 1024 * 1024
    """Token budget of admitted requests, each counted as n x (prompt + max_tokens). A
    request that would exceed it waits in a FIFO queue; one larger than the whole budget
    runs when nothing else is in flight."""
    max_queued_requests: Annotated[int, Field(ge=0)] = 4096
    """Most requests waiting for the token budget; beyond it the server answers 503 with
    Retry-After."""


class ServerConfig(PrlModel):
    """HTTP server of the inference backend."""

    host: str = "127.0.0.1"
    """Bind address; anything but loopback requires api_key for admin routes."""
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    """Port (0 picks a free one and writes it to the ready file)."""
    api_key: str | None = None
    """Bearer token for admin routes ($PRL_API_KEY when unset)."""
    ready_file: Path | None = None
    """Write the bound URL here once serving ($PRL_READY_FILE when unset)."""
    limits: ServerLimitsConfig = Field(default_factory=ServerLimitsConfig)
    """Per-request and in-flight limits that keep one client from exhausting the server."""
    admin_timeout: Annotated[float, Field(gt=0)] = 600.0
    """Seconds an admin route waits for something outside the request (the trainer forming
    the weight-broadcast group, the engine draining for a weight swap) before answering
    504 naming what it waited for."""
    engines: Annotated[int, Field(ge=1)] | None = None
    """Engine processes behind one address (data parallel): above 1, a router listens on
    ``port`` and spreads requests over engines on ``backend_port`` + i. None: under
    ``prl rl``/``prl sft`` one engine per inference GPU's worth of ``[deployment]
    num_infer_gpus`` (GPUs per engine: the backend's worker count), else 1."""
    backend_port: Annotated[int, Field(ge=0, le=65535)] = 8100
    """First engine's port when a router is in front (engine i listens on backend_port + i;
    0 picks free ports)."""
    router: Literal["prl"] = "prl"
    """Router in front of several engines: prl's own (``prl.router``); the reference's
    vllm-router binary is not used."""


class InferenceConfig(PrlModel):
    """The inference server."""

    model: Annotated[PolicyModelConfig, _INFERENCE_MODEL] = Field(default_factory=PolicyModelConfig)
    """Model served."""
    tokenizer: Annotated[TokenizerConfig, _CHAT_TEMPLATE] = Field(default_factory=TokenizerConfig)
    """Tokenizer (chat_template must match the other components)."""
    server: ServerConfig = Field(default_factory=ServerConfig)
    """HTTP server."""
    backend: _INFERENCE_BACKENDS = Field(default_factory=lambda: _default_plugin("inference_backends"))
    """Inference backend, selected by ``type`` (torch, vllm). A backend may also read its
    engine's own argument names from ``[inference.<type>]`` (``[inference.vllm]``), which
    selects it."""
    max_model_len: Annotated[int, Field(ge=8)] | None = None
    """Context length; None uses the model's."""
    seed: int = 0
    """Sampling seed base."""
    log: Annotated[LogConfig, _LOG] = Field(default_factory=LogConfig)
    """Logging."""
    output_dir: Annotated[Path, Shared("output_dir")] = Field(default_factory=default_output_dir)
    """Root of run directories."""
    run: Annotated[RunConfig, Shared("run")] = Field(default_factory=RunConfig)
    """Run identity."""
    env_vars: EnvVars = {}
    """Environment variables set in this component's process (over the top-level env_vars)."""
    slurm: _SLURM = None
    """Run ``prl inference`` as a SLURM job of its own (optional; --dry-run renders it only).
    Under ``prl rl`` it is filled from the run's ``[slurm]``, and the server runs inside the
    run's job instead (docs/slurm.md)."""

    @classmethod
    def passthrough_sections(cls) -> list[str]:
        """``[inference.<type>]`` tables the installed backends read (see ``backend``)."""
        return list(_backend_sections())

    @model_validator(mode="before")
    @classmethod
    def _backend_section(cls, data: Any) -> Any:
        return expand_backend_section(data) if isinstance(data, dict) else data


def _backend_sections() -> dict[str, Any]:
    from prl.plugins import get_registry

    classes = get_registry().classes("inference_backends")
    return {tag: c.Config for tag, c in classes.items() if getattr(c.Config, "has_section", False)}


def expand_backend_section(data: dict[str, Any]) -> dict[str, Any]:
    """Fold the reference spelling ``[inference.<type>]`` of a raw ``[inference]`` table
    into ``backend`` (selecting that type) via the backend's ``absorb_section``."""
    sections = _backend_sections()
    found = [key for key in data if key in sections and key not in InferenceConfig.model_fields]
    if not found:
        return data
    if len(found) > 1:
        raise ValueError(f"inference.{found[0]} and inference.{found[1]} select different backends; keep one")
    tag = found[0]
    data = dict(data)
    section = data.pop(tag)
    if section is None:
        return data
    if not isinstance(section, dict):
        raise ValueError(f"inference.{tag} must be a table of {tag} arguments, got {section!r}")
    backend = data.get("backend")
    backend = dict(backend) if isinstance(backend, dict) else {}
    if backend.get("type", tag) != tag:
        raise ValueError(
            f"inference.{tag} selects the {tag} backend, but inference.backend.type is {backend['type']!r}"
        )
    data["backend"] = {**backend, "type": tag}
    return sections[tag].absorb_section(section, data)
