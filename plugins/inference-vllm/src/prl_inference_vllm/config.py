"""``[inference.backend] type = "vllm"``: typed common vLLM settings plus a pass-through.

The typed fields cover what most runs set; ``extra_args`` carries any other argument of
vLLM's OpenAI server (``vllm serve --help``) by its snake_case or kebab-case name. Both are
turned into one vLLM command line by :func:`vllm_argv` and parsed by vLLM's own argument
parser, so vLLM validates every value and an unknown name fails before the engine starts.
Building the command line needs no vLLM import (orchestrator nodes validate this config
without vLLM installed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from prl.contracts import InferenceBackendConfig
from prl_inference_vllm.section import absorb_vllm_section, check_vllm_name

if TYPE_CHECKING:
    from prl.config.components import InferenceConfig

# Set by prl from other sections (model, server, tokenizer, max_model_len, seed) or by
# the backend itself; giving them in extra_args would silently fight those settings.
RESERVED_ARGS = {
    "model": "model.name",
    "host": "server.host",
    "port": "server.port",
    "tokenizer": "tokenizer.name",
    "chat_template": "tokenizer.chat_template",
    "trust_remote_code": "tokenizer.trust_remote_code",
    "max_model_len": "max_model_len",
    "seed": "seed",
    "served_model_name": "model.name",
    "api_key": "server.api_key",
    "worker_extension_cls": "(set by the backend)",
    "uds": "(server.host/port)",
    "headless": "(not supported)",
    "api_server_count": "(one API process serves the admin routes)",
}


class VllmInferenceConfig(InferenceBackendConfig):
    """vLLM's OpenAI-compatible server with prl's token and admin routes."""

    has_section: ClassVar[bool] = True

    type: Literal["vllm"] = "vllm"
    """Selects this backend."""
    dtype: Literal["auto", "float32", "bfloat16", "float16", "half", "float"] = "auto"
    """Weight and activation dtype; auto follows the checkpoint (bfloat16 for float32 ones on GPU)."""
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    """Fraction of accelerator memory vLLM may take (weights, activations, KV cache)."""
    tensor_parallel_size: Annotated[int, Field(ge=1)] = 1
    """GPUs one model is split across."""
    data_parallel_size: Annotated[int, Field(ge=1)] = 1
    """Engine replicas behind this server."""
    max_num_seqs: Annotated[int, Field(ge=1)] | None = None
    """Most sequences scheduled together; None keeps vLLM's default."""
    max_num_batched_tokens: Annotated[int, Field(ge=1)] | None = None
    """Token budget of one scheduler step; None keeps vLLM's default."""
    enforce_eager: bool = False
    """Skip graph capture and compilation (much faster start, slower decoding; advisable on CPU)."""
    enable_prefix_caching: bool | None = None
    """Reuse KV blocks of shared prompt prefixes; None keeps vLLM's default."""
    enable_lora: bool = False
    """Allow LoRA adapters (/load_lora_adapter, ``model`` = adapter name in requests)."""
    max_lora_rank: Annotated[int, Field(ge=1)] | None = None
    """Largest LoRA rank accepted; None keeps vLLM's default."""
    max_loras: Annotated[int, Field(ge=1)] | None = None
    """Adapters resident at once; None keeps vLLM's default."""
    logprobs_mode: Literal["processed_logprobs", "raw_logprobs"] = "processed_logprobs"
    """processed: logprobs of the temperature-scaled (and top-k/p-truncated) distribution the
    token was sampled from, which the trainer recomputes; raw: of the unscaled model output."""
    max_logprobs: Annotated[int, Field(ge=0)] = 20
    """Most top logprobs a request may ask for (per sampled and per prompt token)."""
    ready_file: Path | None = None
    """Write the bound base URL (http://host:port) here once serving; $PRL_READY_FILE when unset."""
    extra_args: dict[str, Any] = {}
    """Any other vLLM engine/server argument by name, e.g. {"block_size": 32, "kv_cache_dtype": "fp8"};
    true adds a flag, false adds --no-<flag>, lists and dicts are passed as JSON."""

    @model_validator(mode="after")
    def _no_reserved_extra(self) -> VllmInferenceConfig:
        for key in self.extra_args:
            name = _snake(key)
            if name in RESERVED_ARGS:
                raise ValueError(f"extra_args.{key} is set by prl from {RESERVED_ARGS[name]}; set it there instead")
            if name in type(self).model_fields and name not in ("type", "extra_args", "ready_file"):
                raise ValueError(f"extra_args.{key} duplicates the typed field '{name}'; set that field instead")
            check_vllm_name(name, "inference.backend.extra_args")
        return self

    def worker_count(self) -> int:
        return self.tensor_parallel_size * self.data_parallel_size

    @classmethod
    def absorb_section(cls, section: dict[str, Any], inference: dict[str, Any]) -> dict[str, Any]:
        """``[inference.vllm]``: vLLM argument names (see :mod:`prl_inference_vllm.section`)."""
        typed = set(cls.model_fields) - {"type", "extra_args", "ready_file"}
        return absorb_vllm_section(section, inference, typed)


def _snake(key: str) -> str:
    return key.strip().lstrip("-").replace("-", "_")


def _flag(name: str, value: Any) -> list[str]:
    """One vLLM argument as command-line tokens (vLLM's parser reads JSON for dict/list args)."""
    flag = "--" + name.replace("_", "-")
    if value is True:
        return [flag]
    if value is False:
        return ["--no-" + name.replace("_", "-")]
    if value is None:
        return []
    if isinstance(value, (dict, list)):
        return [flag, json.dumps(value)]
    return [flag, str(value)]


def vllm_argv(cfg: InferenceConfig) -> list[str]:
    """The vLLM OpenAI-server command line for a resolved ``InferenceConfig``.

    Typed backend fields first, then ``extra_args`` (whose names were checked not to
    collide with them). ``served_model_name`` is ``model.name`` so clients address the
    model by the same name in every backend.
    """
    b = cfg.backend
    args: dict[str, Any] = {
        "model": cfg.model.name,
        "served_model_name": cfg.model.name,
        "host": cfg.server.host,
        "port": cfg.server.port,
        "tokenizer": cfg.tokenizer.name,
        "trust_remote_code": cfg.tokenizer.trust_remote_code or None,
        "chat_template": cfg.tokenizer.chat_template,
        "max_model_len": cfg.max_model_len,
        "seed": cfg.seed,
        "dtype": b.dtype,
        "gpu_memory_utilization": b.gpu_memory_utilization,
        "tensor_parallel_size": b.tensor_parallel_size,
        "data_parallel_size": b.data_parallel_size if b.data_parallel_size > 1 else None,
        "max_num_seqs": b.max_num_seqs,
        "max_num_batched_tokens": b.max_num_batched_tokens,
        "enforce_eager": b.enforce_eager or None,
        "enable_prefix_caching": b.enable_prefix_caching,
        "enable_lora": lora_enabled(cfg) or None,
        "max_lora_rank": b.max_lora_rank or _lora_rank(cfg),
        "max_loras": b.max_loras,
        "logprobs_mode": b.logprobs_mode,
        "max_logprobs": b.max_logprobs,
        "uvicorn_log_level": _uvicorn_level(cfg.log.level),
        # Workers gain prl_reload_weights (see prl_inference_vllm.worker).
        "worker_extension_cls": "prl_inference_vllm.worker.PrlWorkerExtension",
    }
    argv: list[str] = []
    for name, value in args.items():
        argv += _flag(name, value)
    for key, value in b.extra_args.items():
        argv += _flag(_snake(key), value)
    return argv


def lora_enabled(cfg: InferenceConfig) -> bool:
    """LoRA is on when asked for here or when the run trains one ([model.lora] reaches
    ``inference.model.lora``)."""
    return bool(cfg.backend.enable_lora or getattr(cfg.model, "lora", None) is not None)


# Ranks vLLM accepts for max_lora_rank; a run's rank is rounded up to the next of them.
_VLLM_RANKS = (16, 32, 64, 128, 256, 320, 512)


def _lora_rank(cfg: InferenceConfig) -> int | None:
    lora = getattr(cfg.model, "lora", None)
    if lora is None or lora.rank <= _VLLM_RANKS[0]:
        return None  # vLLM's default (16) fits
    return next((r for r in _VLLM_RANKS if r >= lora.rank), lora.rank)


def _uvicorn_level(level: str) -> str:
    return {"debug": "debug", "info": "info", "warning": "warning", "error": "error"}.get(level, "info")
