"""Loading new policy weights and LoRA adapters from directories the trainer writes.

Full weights: every ``*.safetensors`` file of the directory (``model.safetensors`` or the
shards of an index) is read, each tensor must name a parameter of the served model with
the same shape, and every parameter must be covered (a tied output embedding counts as
covered by its input twin). Anything else means the directory holds another architecture
and is refused before a single parameter changes.

Weights may come in the served model's own in-memory layout or in the checkpoint layout
``save_pretrained`` writes (and the trainer publishes): transformers fuses an MoE layer's
experts, one 2-D weight each in a checkpoint, into 3-D tensors in memory. The checkpoint
layout is converted with transformers' own weight conversions of the served model
(:func:`model_layout`), and checked after conversion.

LoRA adapters use the PEFT layout: ``adapter_config.json`` (``r``, ``lora_alpha``,
``use_rslora``) and ``adapter_model.safetensors`` with ``<module>.lora_A.weight`` [r, in] and
``<module>.lora_B.weight`` [out, r]. The served output of a target linear layer for a row
using adapter a is ``W x + s_a · B_a A_a x`` with ``s = alpha / r`` (``alpha / sqrt(r)`` for
rsLoRA); rows of one batch may use different adapters or none.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch
from safetensors.torch import load_file


class WeightError(ValueError):
    """A weight or adapter directory that cannot be loaded into the served model."""


def read_weights(weight_dir: str, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Read and check a directory of HF safetensors weights against ``model``."""
    path = Path(weight_dir)
    if not path.is_dir():
        raise WeightError(f"weight_dir '{weight_dir}' does not exist or is not a directory")
    files = sorted(f for f in path.glob("*.safetensors") if not f.name.startswith("adapter_"))
    if not files:
        raise WeightError(f"weight_dir '{weight_dir}' holds no *.safetensors file")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    problem = architecture_mismatch({k: tuple(t.shape) for k, t in tensors.items()}, model)
    if problem:
        raise WeightError(f"weight_dir '{weight_dir}' holds a different architecture ({problem})")
    return model_layout(tensors, model)


def model_layout(tensors: dict[str, torch.Tensor], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``tensors`` in ``model``'s in-memory layout: as they are when the model has all their
    names, else converted from the checkpoint layout as ``from_pretrained`` converts a
    checkpoint (same transforms, same order). ValueError when they do not convert."""
    named = model.state_dict(keep_vars=True)
    if all(k in named for k in tensors) or getattr(model, "config", None) is None:
        return tensors  # nothing to convert, or not a transformers model: no conversions known
    from copy import deepcopy

    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming, dot_natural_key, rename_source_key

    transforms = getattr(model, "_weight_conversions", None)
    if transforms is None:
        transforms = get_model_conversion_mapping(model, add_legacy=False)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    by_pattern = {p: c for c in converters for p in c.source_patterns}
    pending: dict[str, WeightRenaming | WeightConverter] = {}
    # natural order: expert 10 after expert 9, so stacked experts land at their own index
    for key in sorted(tensors, key=dot_natural_key):
        target, pattern = rename_source_key(key, renamings, converters)
        if pattern is None:
            pending.setdefault(target, WeightRenaming(key, target)).add_tensor(target, key, key, tensors[key])
        else:
            pending.setdefault(target, deepcopy(by_pattern[pattern])).add_tensor(target, key, pattern, tensors[key])
    out: dict[str, torch.Tensor] = {}
    for target, transform in pending.items():
        try:
            converted = transform.convert(target, model=model, config=model.config)
        except Exception as exc:  # a torch op on tensors that do not fit together
            raise ValueError(f"{target}: {exc}") from None
        for name, value in converted.items():
            out[name] = value[0] if isinstance(value, list) else value
    return out


def architecture_mismatch(shapes: dict[str, tuple[int, ...]], model: torch.nn.Module) -> str | None:
    """Why tensors named and shaped as ``shapes`` (in the model's layout or the checkpoint
    layout) cannot replace ``model``'s weights (names it lacks, wrong shapes, parameters
    left uncovered), or None when they can."""
    named = model.state_dict(keep_vars=True)
    if not all(k in named for k in shapes):
        # Converted on meta tensors: the names and shapes the model layout would get.
        try:
            meta = {k: torch.empty(shape, device="meta") for k, shape in shapes.items()}
            shapes = {k: tuple(t.shape) for k, t in model_layout(meta, model).items()}
        except ValueError as exc:
            return f"not the served model's checkpoint layout: {exc}"
    unknown = sorted(k for k in shapes if k not in named)
    wrong = sorted(k for k, shape in shapes.items() if k in named and tuple(shape) != tuple(named[k].shape))
    covered = {id(named[k]) for k in shapes if k in named}
    missing = sorted(n for n, p in model.named_parameters() if id(p) not in covered)
    parts = []
    for label, names in (("unexpected", unknown), ("shape mismatch", wrong), ("missing", missing)):
        if names:
            parts.append(f"{label}: {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}")
    return "; ".join(parts) or None


@torch.no_grad()
def apply_weights(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    named = model.state_dict(keep_vars=True)
    for name, tensor in tensors.items():
        named[name].copy_(tensor.to(named[name].dtype))


_LORA_KEY = re.compile(r"^(?:base_model\.model\.)?(.+)\.lora_([AB])(?:\.[^.]+)?\.weight$")


def read_lora(lora_path: str, model: torch.nn.Module) -> dict[str, tuple[torch.Tensor, torch.Tensor, float]]:
    """Read a PEFT adapter: target module name -> (A [r, in], B [out, r], scale)."""
    path = Path(lora_path)
    cfg_file, weights = path / "adapter_config.json", path / "adapter_model.safetensors"
    if not cfg_file.is_file() or not weights.is_file():
        raise WeightError(f"lora_path '{lora_path}' needs adapter_config.json and adapter_model.safetensors")
    cfg = json.loads(cfg_file.read_text())
    r = int(cfg.get("r", 8))
    alpha = float(cfg.get("lora_alpha", r))
    scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in load_file(str(weights)).items():
        m = _LORA_KEY.match(key)
        if not m:
            raise WeightError(f"lora_path '{lora_path}': unexpected tensor '{key}'")
        pairs.setdefault(m.group(1), {})[m.group(2)] = tensor
    modules = dict(model.named_modules())
    param = next(model.parameters())
    out: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = {}
    for name, ab in pairs.items():
        target = modules.get(name)
        if not isinstance(target, torch.nn.Linear) or set(ab) != {"A", "B"}:
            raise WeightError(
                f"lora_path '{lora_path}': '{name}' is not a linear layer of the model with lora_A and lora_B"
            )
        a, b = ab["A"], ab["B"]
        if a.shape[1] != target.in_features or b.shape[0] != target.out_features or a.shape[0] != b.shape[1]:
            raise WeightError(f"lora_path '{lora_path}': shapes of '{name}' do not fit the model")
        out[name] = (a.to(param.device, param.dtype), b.to(param.device, param.dtype), scale)
    if not out:
        raise WeightError(f"lora_path '{lora_path}' holds no LoRA tensors")
    return out


class LoraSet:
    """Loaded adapters and forward hooks that add each row's adapter delta."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.adapters: dict[str, dict[str, tuple[torch.Tensor, torch.Tensor, float]]] = {}
        self._hooked: set[str] = set()
        self._rows: dict[str, torch.Tensor] = {}

    def load(self, name: str, weights: dict[str, tuple[torch.Tensor, torch.Tensor, float]]) -> None:
        """Add or replace adapter ``name`` (call on the engine thread, between steps)."""
        modules = dict(self.model.named_modules())
        for module_name in weights:
            if module_name not in self._hooked:
                modules[module_name].register_forward_hook(self._hook(module_name))
                self._hooked.add(module_name)
        self.adapters[name] = weights

    def set_rows(self, adapters: list[str | None], device: torch.device) -> None:
        rows: dict[str, list[int]] = {}
        for i, name in enumerate(adapters):
            if name is not None:
                rows.setdefault(name, []).append(i)
        self._rows = {n: torch.tensor(ix, device=device) for n, ix in rows.items()}

    def _hook(self, module_name: str):
        def add_delta(module, args, output):
            for name, idx in self._rows.items():
                weights = self.adapters[name].get(module_name)
                if weights is None:
                    continue
                a, b, scale = weights
                x = args[0].index_select(0, idx)
                output = output.index_add(0, idx, (x @ a.T) @ b.T * scale)
            return output

        return add_delta
