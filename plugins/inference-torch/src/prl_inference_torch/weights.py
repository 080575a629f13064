"""Loading new policy weights and LoRA adapters from directories the trainer writes.

Full weights: every ``*.safetensors`` file of the directory (``model.safetensors`` or the
shards of an index) is read, each tensor must name a parameter of the served model with
the same shape, and every parameter must be covered (a tied output embedding counts as
covered by its input twin). Anything else means the directory holds another architecture
and is refused before a single parameter changes.

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
    return tensors


def architecture_mismatch(shapes: dict[str, tuple[int, ...]], model: torch.nn.Module) -> str | None:
    """Why tensors named and shaped as ``shapes`` cannot replace ``model``'s weights (names
    it lacks, wrong shapes, parameters left uncovered), or None when they can."""
    named = model.state_dict(keep_vars=True)
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
