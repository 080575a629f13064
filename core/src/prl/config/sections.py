"""Config sections shared by several root configs (all torch-free)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from prl.config.base import PrlModel
from prl.config.policy import LORA_TARGETS, LoraConfig, ModelConfig, PolicyModelConfig  # noqa: F401 (re-exported)
from prl.config.unions import PluginConfig
from prl.layout import parse_step


def _env_values(value: object) -> object:
    # TOML and JSON give numbers unquoted (OMP_NUM_THREADS = 1); the environment holds text.
    if isinstance(value, dict):
        return {k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for k, v in value.items()}
    return value


EnvVars = Annotated[dict[str, str], BeforeValidator(_env_values)]
"""Environment variables for a process: names to values (numbers are written as text)."""


def default_output_dir() -> Path:
    return Path(os.environ.get("PRL_OUTPUT_DIR") or "outputs")


class RunConfig(PrlModel):
    """Run identity: the run directory is ``output_dir / run.dir``."""

    name: str | None = None
    """Run name; generated as <envs>--<model>--<8 hex> when unset (lowercased)."""
    dir: str | None = None
    """Directory under output_dir; defaults to the run name."""

    @field_validator("name", "dir")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = Path(value).parts
        if Path(value).is_absolute() or ".." in parts or not parts:
            raise ValueError(f"'{value}' must be a relative path inside output_dir")
        return value.lower() if "/" not in value else value


def _default_log_level() -> str:
    from prl.logs import default_level

    return default_level()


class LogConfig(PrlModel):
    """Logging of every component."""

    level: Literal["debug", "info", "warning", "error"] = Field(default_factory=_default_log_level)
    """Log level; the default is $PRL_LOG_LEVEL, else $PRIME_LOG_LEVEL, else info."""
    json_logging: bool = False
    """Write NDJSON log lines (time, level, logger, message) instead of text."""


class TokenizerConfig(PrlModel):
    """Tokenizer; defaults to the model's."""

    name: str | None = None
    """HF tokenizer id or directory; None uses the model's."""
    trust_remote_code: bool = False
    """Allow tokenizer code from the model directory."""
    chat_template: str | None = None
    """Override the tokenizer's chat template."""


class CkptConfig(PrlModel):
    """Checkpointing (off unless this section is present)."""

    interval: Annotated[int, Field(ge=1)] | None = None
    """Save at every step that is a multiple of this; None saves only the final step."""
    keep_last: Annotated[int, Field(ge=1)] | None = None
    """Keep the N newest checkpoints."""
    keep_interval: Annotated[int, Field(ge=1)] | None = None
    """Keep forever every checkpoint whose step is a multiple of K."""
    output_dir: Path | None = None
    """Write checkpoints here instead of <run_dir>/checkpoints."""


class ResumeConfig(PrlModel):
    """Resume from a checkpoint (``--resume`` alone: the latest complete step of this run)."""

    step: Annotated[int, Field(ge=1)] | None = None
    """Resume from checkpoints/step_N of this run."""
    dir: Path | None = None
    """Fork: load <other_run>/checkpoints/step_N into this new run."""
    skip_optimizer: bool = False
    """Do not restore the optimizer state."""
    skip_scheduler: bool = False
    """Do not restore the scheduler; it is rebuilt over the remaining steps."""
    skip_progress: bool = False
    """Do not restore step and token counters."""
    skip_dataloader: bool = False
    """SFT: do not restore the dataloader position."""

    @model_validator(mode="after")
    def _check(self) -> ResumeConfig:
        if self.dir is not None:
            if self.step is not None:
                raise ValueError("resume.dir cannot be combined with resume.step")
            name = Path(self.dir).name
            if parse_step(name) is None:
                raise ValueError(f"resume.dir must end in step_<digits>, got '{self.dir}'")
        return self


class RolloutTransportConfig(PrlModel):
    """How the orchestrator ships batches to the trainer."""

    type: Literal["filesystem", "zmq"] = "filesystem"
    """filesystem: batches/step_S/rank_r.bin, written then renamed (needs storage both the
    orchestrator and the trainer see); zmq: the orchestrator serves batches on a TCP socket
    and each trainer rank asks for its own."""
    host: str = "localhost"
    """zmq: the orchestrator's host, which trainer ranks connect to."""
    port: Annotated[int, Field(ge=0, le=65535)] = 5555
    """zmq: the orchestrator's port (0: any free port, picked when the run is launched)."""
    hwm: Annotated[int, Field(ge=1)] = 10
    """zmq: messages queued per trainer rank before sending blocks (ZMQ high-water mark)."""


class SamplingConfig(PrlModel):
    """Sampling parameters for rollouts."""

    temperature: Annotated[float, Field(ge=0)] = 1.0
    """Sampling temperature."""
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    """Nucleus sampling mass."""
    top_k: Annotated[int, Field(ge=1)] | None = None
    """Top-k cut-off; None disables."""
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    """Cap on generated tokens per turn; None means no cap."""
    seed: int | None = None
    """Sampling seed."""


class PartialSamplingConfig(PrlModel):
    """Per-source sampling overrides; unset fields inherit the group's values."""

    temperature: Annotated[float, Field(ge=0)] | None = None
    """Sampling temperature."""
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    """Nucleus sampling mass."""
    top_k: Annotated[int, Field(ge=1)] | None = None
    """Top-k cut-off."""
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    """Cap on generated tokens per turn."""
    seed: int | None = None
    """Sampling seed."""


class ClientConfig(PrlModel):
    """OpenAI-compatible inference endpoint."""

    base_url: str = "http://127.0.0.1:8000"
    """Server address (without /v1)."""
    api_key: str | None = None
    """Bearer token; $PRL_API_KEY when unset."""
    timeout: Annotated[float, Field(gt=0)] = 600.0
    """Seconds to wait for one request."""


class ConcurrencyConfig(PrlModel):
    """In-flight rollout band; adaptive between min and max."""

    min_inflight: Annotated[int, Field(ge=1)] = 1
    """Lower bound on concurrent rollouts."""
    max_inflight: Annotated[int, Field(ge=1)] = 1024
    """Upper bound on concurrent rollouts."""

    @model_validator(mode="after")
    def _band(self) -> ConcurrencyConfig:
        if self.min_inflight > self.max_inflight:
            raise ValueError(f"min_inflight ({self.min_inflight}) exceeds max_inflight ({self.max_inflight})")
        return self


_WEIGHT_TRANSPORTS = PluginConfig["weight_transports"]
WeightBroadcastField = Annotated[
    _WEIGHT_TRANSPORTS, Field(default_factory=lambda: _default_plugin("weight_transports"))
]
"""A weight transport config, selected by ``type``; the installed default when not given."""

_RENDERERS = PluginConfig["renderers"]
RendererField = Annotated[_RENDERERS, Field(default_factory=lambda: _default_plugin("renderers"))]
"""A renderer config; ``name = "auto"`` when not given."""


def _default_plugin(kind: str):
    """The default variant of a plugin union: the installed class that declares
    ``is_default = True`` (None when no installed plugin does)."""
    from prl.plugins import get_registry

    registry = get_registry()
    tag = registry.default_tag(kind)
    return registry.classes(kind)[tag].Config() if tag is not None else None


def _default_tag(kind: str) -> str:
    """The tag of the installed default plugin of ``kind`` ("" when none declares itself the
    default, so the run fails naming the kind when it needs one)."""
    from prl.plugins import get_registry

    return get_registry().default_tag(kind) or ""
