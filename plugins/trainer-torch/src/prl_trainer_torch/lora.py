"""LoRA adapters on a transformers model, written for FSDP2 (no PEFT dependency).

A target ``nn.Linear`` becomes a :class:`LoraLinear` in place (its class is swapped, so
``weight`` and ``bias`` keep their names and a base checkpoint still loads) and gains two
sub-layers, ``lora_A`` (in -> r, Kaiming-uniform) and ``lora_B`` (r -> out, zeros):

    y = x W^T + b + (alpha / r) * B(A(dropout(x)))

B starts at zero, so a fresh adapter computes exactly the base model. Every base parameter
is frozen; only ``lora_A`` / ``lora_B`` train, and the optimizer holds only those.

Tensor names follow PEFT: the adapter of ``model.layers.0.self_attn.q_proj`` is
``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`` (and ``lora_B``), with an
``adapter_config.json`` of ``r``, ``lora_alpha``, ``target_modules``..., so both inference
backends' ``/load_lora_adapter`` and PEFT itself read what the trainer publishes.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from prl.config.errors import ConfigError

PEFT_PREFIX = "base_model.model."
ADAPTER_MARK = ".lora_"


class LoraLinear(nn.Linear):
    """An ``nn.Linear`` with a LoRA branch (built by :func:`apply_lora`, never directly)."""

    lora_A: nn.Linear
    lora_B: nn.Linear
    lora_dropout: nn.Module
    scaling: float

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = F.linear(x, self.weight, self.bias)
        return base + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling

    def merged_weight(self) -> torch.Tensor:
        """W + (alpha / r) B A: the plain weight that computes what this layer computes."""
        delta = self.lora_B.weight.float() @ self.lora_A.weight.float()
        return (self.weight.float() + self.scaling * delta).to(self.weight.dtype)


def _convert(linear: nn.Linear, rank: int, alpha: float, dropout: float) -> None:
    dev, dtype = linear.weight.device, linear.weight.dtype
    linear.__class__ = LoraLinear
    linear.lora_A = nn.Linear(linear.in_features, rank, bias=False, device=dev, dtype=dtype)
    linear.lora_B = nn.Linear(rank, linear.out_features, bias=False, device=dev, dtype=dtype)
    # The usual LoRA start: A random, B zero, so the adapted model starts as the base.
    nn.init.kaiming_uniform_(linear.lora_A.weight, a=math.sqrt(5))
    nn.init.zeros_(linear.lora_B.weight)
    linear.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
    linear.scaling = alpha / rank


def apply_lora(hf: nn.Module, cfg: Any) -> list[str]:
    """Give every linear layer named in ``cfg.target_modules`` an adapter and freeze the rest;
    returns the adapted module names. A config that matches no layer is a ConfigError."""
    targets = set(cfg.target_modules)
    names = [
        name
        for name, module in hf.named_modules()
        if isinstance(module, nn.Linear)
        and name.rsplit(".", 1)[-1] in targets
        # the output head shares its matrix with the embeddings in tied models; never adapt it
        and module is not hf.get_output_embeddings()
    ]
    if not names:
        found = sorted({n.rsplit(".", 1)[-1] for n, m in hf.named_modules() if isinstance(m, nn.Linear)})
        raise ConfigError(
            f"model.lora.target_modules: no linear layer is named any of {sorted(targets)} (this model has: {found})"
        )
    for p in hf.parameters():
        p.requires_grad_(False)
    modules = dict(hf.named_modules())
    for name in names:
        _convert(modules[name], cfg.rank, cfg.alpha, cfg.dropout)
    return names


def is_adapter_key(name: str) -> bool:
    return ADAPTER_MARK in name


def adapter_tensors(hf: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter's full CPU tensors under PEFT names (collective under FSDP2: every rank
    calls it, gathering only the adapter, never the frozen base)."""
    out = {}
    for name, param in hf.named_parameters():
        if not is_adapter_key(name):
            continue
        full = getattr(param, "full_tensor", None)
        tensor = full() if callable(full) else param
        out[PEFT_PREFIX + name] = tensor.detach().to("cpu", copy=True).contiguous()
    return out


def adapter_config(cfg: Any, base_model: str, modules: list[str]) -> dict[str, Any]:
    """``adapter_config.json`` in PEFT's spelling."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": cfg.rank,
        "lora_alpha": cfg.alpha,
        "lora_dropout": cfg.dropout,
        "target_modules": sorted({m.rsplit(".", 1)[-1] for m in modules}),
        "bias": "none",
        "use_rslora": False,
        "fan_in_fan_out": False,
        "inference_mode": True,
    }


def merge_lora(hf: nn.Module) -> int:
    """Fold every adapter into its base weight and turn the layers back into plain
    ``nn.Linear`` (so ``save_pretrained`` writes a normal model); returns how many."""
    merged = 0
    for module in list(hf.modules()):
        if isinstance(module, LoraLinear):
            with torch.no_grad():
                module.weight.copy_(module.merged_weight())
            for attr in ("lora_A", "lora_B", "lora_dropout"):
                delattr(module, attr)
            del module.scaling
            module.__class__ = nn.Linear
            merged += 1
    return merged


class Adapter:
    """A run's LoRA adapter: the adapted module names and its ``adapter_config.json``."""

    def __init__(self, hf: nn.Module, cfg: Any, base_model: str) -> None:
        self.modules = apply_lora(hf, cfg)
        self.config = adapter_config(cfg, base_model, self.modules)


def maybe_adapter(hf: nn.Module, model_cfg: Any) -> Adapter | None:
    """The adapter ``[model.lora]`` asks for (applied to ``hf``), or None without it."""
    lora = getattr(model_cfg, "lora", None)
    return Adapter(hf, lora, model_cfg.name) if lora is not None else None
