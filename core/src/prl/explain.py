"""``prl rl @ cfg --explain``: what a resolved RL config means, without launching anything.

Sizes come from the model's own files: the parameter count from the safetensors headers
(exact, no weights read), else from ``config.json`` (the usual decoder formula). The memory
estimate is per trainer rank and deliberately rough: weights, gradients and AdamW's two
moments in the trainer's dtype, sharded over the ranks (FSDP), plus activations of one
micro-batch of ``seq_len`` tokens (about 16 values per token, hidden unit and layer, or 2
with activation checkpointing) and its float32 logits.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prl.hub import local_dir

if TYPE_CHECKING:
    from prl.config.roots import RLConfig

DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "BF16": 2,
    "F16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "I8": 1,
    "U8": 1,
}


@dataclass
class ModelSize:
    """What the estimates need from a model: parameters and the shape of its activations."""

    params: int
    hidden: int | None = None
    layers: int | None = None
    vocab: int | None = None
    source: str = "safetensors headers"


def model_dir(name: str) -> Path | None:
    """The local directory of model ``name``: the path itself, or its cached hub snapshot."""
    found = local_dir(name)
    return found if found is not None and found.is_dir() else None


def _safetensors_params(directory: Path) -> int:
    total = 0
    for file in directory.glob("*.safetensors"):
        with open(file, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        total += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
    return total


def model_size(name: str) -> ModelSize | None:
    """Parameters and shape of model ``name`` (None when its files are not on this machine)."""
    directory = model_dir(name)
    if directory is None:
        return None
    cfg: dict[str, Any] = {}
    if (directory / "config.json").is_file():
        cfg = json.loads((directory / "config.json").read_text())
        cfg = cfg.get("text_config", cfg) if "text_config" in cfg else cfg
    hidden, layers, vocab = cfg.get("hidden_size"), cfg.get("num_hidden_layers"), cfg.get("vocab_size")
    params = _safetensors_params(directory)
    if params:
        return ModelSize(params, hidden, layers, vocab)
    if not (hidden and layers and vocab):
        return None
    inter = cfg.get("intermediate_size") or 4 * hidden
    # attention (4 h^2) + gated MLP (3 h i) per layer, embeddings and an untied head.
    estimate = layers * (4 * hidden * hidden + 3 * hidden * inter) + 2 * vocab * hidden
    return ModelSize(estimate, hidden, layers, vocab, source="config.json (estimated)")


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 1024**3:.2f} GiB" if n_bytes >= 1024**3 else f"{n_bytes / 1024**2:.1f} MiB"


def trainer_dtype_bytes(cfg: RLConfig) -> tuple[int, str]:
    """Bytes per trainer parameter and the dtype's name (``auto``: bf16 with GPUs, else fp32)."""
    dtype = cfg.trainer.model.param_dtype(bool(getattr(cfg.deployment, "num_train_gpus", 0)))
    return (2 if dtype == "bfloat16" else 4), dtype


def checkpoint_bytes(cfg: RLConfig, size: ModelSize) -> int:
    """One trainer checkpoint: weights plus the optimizer state (AdamW: two moments; SGD: none)."""
    per, _ = trainer_dtype_bytes(cfg)
    states = cfg.trainer.optim.state_per_param()
    return size.params * per * (1 + states)


def explain_rl(cfg: RLConfig) -> list[str]:
    """The lines ``prl rl --explain`` prints for a resolved RLConfig."""
    orch, trainer = cfg.orchestrator, cfg.trainer
    ranks = orch.num_train_workers
    lines = [
        f"Run '{cfg.run.name or '(generated at launch)'}' in {cfg.output_dir}, {cfg.max_steps or 'unbounded'} steps"
    ]
    lines += _per_step(orch, ranks)
    max_off = 0 if orch.deterministic else orch.max_off_policy_steps
    lines.append(
        f"Staleness: a sample trains at most {max_off} step(s) after the policy version that generated it "
        f"(max_off_policy_steps{' = 0: deterministic' if orch.deterministic else ''}); the trainer runs at most one "
        f"version ahead of inference (weight handshake, timeout {cfg.weight_broadcast.timeout:g} s)"
    )
    size = model_size(trainer.model.name or cfg.model.name or "")
    if size is None:
        lines.append(f"Model '{trainer.model.name}': files not on this machine, sizes unknown")
        return lines
    lines += _sizes(cfg, size, ranks)
    return lines


def _per_step(orch: Any, ranks: int) -> list[str]:
    batch, seq_len = orch.batch_size, orch.seq_len
    out = [f"Per step: {batch} samples (rollouts), each at most seq_len = {seq_len} tokens"]
    for source in orch.train.source:
        group = source.group_size or orch.train.group_size
        out.append(f"  source '{source.name}': groups of {group} rollouts per task, weight {source.ratio:g}")
    completion = orch.train.sampling.max_completion_tokens
    if completion:
        out.append(f"  completion tokens per step: at most {batch} x {completion} = {batch * completion:,}")
    out.append(f"  tokens per step: at most {batch} x {seq_len} = {batch * seq_len:,}")
    out.append(
        f"Micro-batches per rank ({ranks} rank{'s' if ranks > 1 else ''}): up to ceil({batch} / {ranks}) = "
        f"{math.ceil(batch / ranks)}, each packing up to {seq_len} tokens (shorter samples share one)"
    )
    return out


def _sizes(cfg: RLConfig, size: ModelSize, ranks: int) -> list[str]:
    per, dtype = trainer_dtype_bytes(cfg)
    weights = size.params * per
    ckpt = checkpoint_bytes(cfg, size)
    keep = cfg.trainer.ckpt.keep_last if cfg.trainer.ckpt is not None else None
    out = [
        f"Model '{cfg.trainer.model.name}': {size.params / 1e6:,.1f} M parameters ({size.source}), trained in {dtype}"
    ]
    if cfg.trainer.ckpt is None:
        out.append(f"Checkpoint: off ([ckpt] not set); one would be {gib(ckpt)} (weights + optimizer state)")
    else:
        kept = f", {keep} kept: {gib(ckpt * keep)}" if keep else ", all kept (set ckpt.keep_last to bound it)"
        out.append(f"Checkpoint: {gib(ckpt)} each (weights + optimizer state){kept}")
    out.append(f"Weight broadcast: {gib(weights)} per version (two newest versions kept under broadcasts/)")
    states = cfg.trainer.optim.state_per_param()
    sharded = weights * (2 + states) / ranks
    activations = 0.0
    if size.hidden and size.layers:
        # a checkpointed layer keeps ~2 values per hidden unit (its input), a full one ~16
        kept = cfg.trainer.model.checkpointed_layers(size.layers)
        per_layer = kept * 2 + (size.layers - kept) * 16
        activations = cfg.orchestrator.seq_len * size.hidden * per_layer * per
    logits = cfg.orchestrator.seq_len * (size.vocab or 0) * 4 * 2
    out.append(
        f"Trainer memory per rank (rough): {gib(sharded + activations + logits)} = params+grads+optimizer "
        f"{gib(sharded)} (sharded over {ranks}) + activations {gib(activations)} + logits {gib(logits)} "
        f"of one {cfg.orchestrator.seq_len}-token micro-batch"
    )
    return out
