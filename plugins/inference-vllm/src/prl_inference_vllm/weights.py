"""Checks a weight directory against the served model before vLLM loads it.

vLLM loads weights in place, tensor by tensor: a directory of another architecture would
fail half-way and leave the engine with a mix of two models. So the directory is checked
up front, in the API process and without torch, from metadata only:

* it is a directory holding ``*.safetensors`` files;
* its ``config.json`` (when present) names the same architecture and the same shape
  (hidden size, layers, heads, vocabulary, ...) as the served model;
* its safetensors headers (an 8-byte little-endian length, then JSON) list exactly the
  tensors of the served checkpoint, each with the same shape. Dtypes may differ: vLLM casts.

Anything that fails is a :class:`WeightError`, answered as a 400 while the old weights
keep serving.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

# Fields of config.json that fix the shape of every tensor.
SHAPE_FIELDS = (
    "model_type",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
)


class WeightError(ValueError):
    """A weight or adapter directory that cannot be loaded into the served model."""


def read_header(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from one safetensors file's JSON header."""
    try:
        with path.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            if size > 100_000_000:
                raise WeightError(f"{path.name}: safetensors header of {size} bytes is not plausible")
            header = json.loads(fh.read(size))
    except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WeightError(f"{path.name} is not a readable safetensors file: {exc}") from None
    return {k: list(v["shape"]) for k, v in header.items() if k != "__metadata__"}


def checkpoint_shapes(directory: str | Path) -> dict[str, list[int]] | None:
    """Tensor shapes of a local checkpoint; None when it is not a local directory of safetensors."""
    root = Path(directory)
    files = sorted(root.glob("*.safetensors")) if root.is_dir() else []
    if not files:
        return None
    shapes: dict[str, list[int]] = {}
    for f in files:
        shapes.update(read_header(f))
    return shapes


def _config(directory: Path) -> dict[str, Any] | None:
    path = directory / "config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise WeightError(f"weight_dir config.json is not valid JSON: {exc}") from None


def check_weight_dir(
    weight_dir: str,
    served_config: dict[str, Any],
    served_shapes: dict[str, list[int]] | None,
) -> Path:
    """Raise :class:`WeightError` unless ``weight_dir`` fits the served model; return its path."""
    root = Path(weight_dir)
    if not root.is_dir():
        raise WeightError(f"weight_dir '{weight_dir}' is not a directory")
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise WeightError(f"weight_dir '{weight_dir}' holds no *.safetensors files")
    config = _config(root)
    if config is not None:
        _check_config(config, served_config)
    shapes: dict[str, list[int]] = {}
    for f in files:
        shapes.update(read_header(f))
    if not shapes:
        raise WeightError(f"weight_dir '{weight_dir}' holds no tensors")
    if served_shapes is not None:
        if served_config.get("tie_word_embeddings"):
            # A trainer may export the tied head as its own tensor; vLLM skips it.
            shapes.pop("lm_head.weight", None)
        _check_shapes(shapes, served_shapes)
    return root


def _check_config(new: dict[str, Any], served: dict[str, Any]) -> None:
    arch_new, arch_served = new.get("architectures"), served.get("architectures")
    if arch_new and arch_served and list(arch_new) != list(arch_served):
        raise WeightError(f"weight_dir architecture {arch_new} differs from the served model's {arch_served}")
    for key in SHAPE_FIELDS:
        a, b = new.get(key), served.get(key)
        if a is not None and b is not None and a != b:
            raise WeightError(f"weight_dir config.json {key}={a!r} differs from the served model's {b!r}")


def _check_shapes(new: dict[str, list[int]], served: dict[str, list[int]]) -> None:
    # Both directions: an extra tensor means another architecture, a missing one would
    # leave part of the old policy in place under the new version's name.
    for names, what in (
        (sorted(set(new) - set(served)), "is not in the served model"),
        (sorted(set(served) - set(new)), "of the served model is missing"),
    ):
        if names:
            more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
            raise WeightError(f"weight_dir tensor '{names[0]}'{more} {what}")
    for name, shape in new.items():
        if shape != served[name]:
            raise WeightError(f"weight_dir tensor '{name}' has shape {shape}, the served model's is {served[name]}")


def check_lora_dir(lora_path: str) -> Path:
    """A PEFT adapter directory: ``adapter_config.json`` plus weights."""
    root = Path(lora_path)
    if not root.is_dir():
        raise WeightError(f"lora_path '{lora_path}' is not a directory")
    if not (root / "adapter_config.json").is_file():
        raise WeightError(f"lora_path '{lora_path}' has no adapter_config.json")
    if not any(root.glob("adapter_model.*")):
        raise WeightError(f"lora_path '{lora_path}' has no adapter_model.safetensors/.bin")
    return root
