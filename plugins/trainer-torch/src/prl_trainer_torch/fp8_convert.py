"""``prl convert to-fp8`` and ``prl convert to-bf16``: between an exported (or downloaded)
bf16 Hugging Face directory and its blockwise FP8 form (:mod:`prl_trainer_torch.fp8`).

Both read the source one safetensors file at a time and write one output file per input
file, so memory stays at about one shard. The output always has a
``model.safetensors.index.json``; ``config.json`` is rewritten (``quantization_config``
added or removed, dtype bfloat16); every other file of the source (tokenizer, generation
config, chat template, README...) is copied as it is.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from prl.config.errors import ConfigError
from prl_trainer_torch.export_files import export_tensors, write_side_files
from prl_trainer_torch.fp8 import BLOCK, SCALE_SUFFIX, dequantize_block, quantization_config, quantize_state

INDEX = "model.safetensors.index.json"
_WEIGHT_FILES = (INDEX, "model.safetensors")


def _usage(message: str) -> ConfigError:
    return ConfigError(message, "Usage error")


def weight_files(src: Path, what: str) -> list[str]:
    """The safetensors files of a model directory, in index order."""
    if (src / INDEX).exists():
        weight_map = json.loads((src / INDEX).read_text())["weight_map"]
        return sorted(set(weight_map.values()))
    if (src / "model.safetensors").exists():
        return ["model.safetensors"]
    raise _usage(f"{what}: {src} has no model.safetensors or {INDEX}")


def read_config(src: Path, what: str) -> dict:
    if not src.is_dir():
        raise _usage(f"{what}: {src} is not a directory")
    if (src / "adapter_config.json").exists():
        raise _usage(f"{what}: {src} is a LoRA adapter (adapter_config.json); merge it into its base model first")
    if not (src / "config.json").exists():
        raise _usage(f"{what}: {src} has no config.json (a broadcast directory is not a model export)")
    return json.loads((src / "config.json").read_text())


def _check_out(src: Path, out: Path, what: str) -> None:
    if out.resolve() == src.resolve():
        raise _usage(f"{what}: the output directory is the source {src}; give another one")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise _usage(f"{what}: the output {out} already exists and is not empty; give a new directory")


@contextmanager
def _staged(out: Path):
    """A scratch directory beside ``out``, renamed to ``out`` only once everything is
    written: a conversion that fails half-way leaves no directory that looks like a model."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
        if out.exists():
            out.rmdir()  # empty: _check_out said so
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _file_has_fp8(path: Path) -> bool:
    with safe_open(str(path), framework="pt") as f:
        return any(f.get_slice(k).get_dtype().startswith("F8") for k in f.keys())


_BYTES = {"F8_E4M3": 1, "F8_E5M2": 1, "BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "BOOL": 1}


def shard_names(count: int) -> list[str]:
    return [f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]


def write_shards(out: Path, shards: Iterable[dict[str, torch.Tensor]], count: int) -> list[str]:
    """``model-0000i-of-0000n.safetensors`` for each of ``count`` shards, then the index;
    returns the modules left in bf16 (:func:`write_index`)."""
    out.mkdir(parents=True, exist_ok=True)
    names = shard_names(count)
    for name, tensors in zip(names, shards, strict=True):
        save_file(tensors, str(out / name), metadata={"format": "pt"})
    return write_index(out, names)


def write_index(out: Path, files: list[str]) -> list[str]:
    """``model.safetensors.index.json`` from the headers of the files on disk, and the 2-D
    weights among them that are not float8: the ``modules_to_not_convert`` of an FP8 dir."""
    weight_map: dict[str, str] = {}
    kept: list[str] = []
    total = 0
    for name in files:
        with safe_open(str(out / name), framework="pt") as f:
            for key in f.keys():
                info = f.get_slice(key)
                shape, dtype = info.get_shape(), info.get_dtype()
                weight_map[key] = name
                total += math.prod(shape) * _BYTES.get(dtype, 4)
                if key.endswith(".weight") and len(shape) == 2 and not dtype.startswith("F8"):
                    kept.append(key[: -len(".weight")])
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / INDEX).write_text(json.dumps(index, indent=2) + "\n")
    return kept


def finish_fp8_export(config, model_name: str, tokenizer: str, out: Path, kept: list[str]) -> None:
    """Side files of a DCP -> FP8 export: those of the bf16 export, plus quantization_config."""
    write_side_files(config, model_name, tokenizer, out, torch.bfloat16)
    write_config(json.loads((out / "config.json").read_text()), out, quantization_config(kept))


def save_fp8_model(hf: torch.nn.Module, model_name: str, tokenizer: str, out: Path) -> Path:
    """One-process ``prl export --dtype fp8``: quantize the loaded model's tensors and write them."""
    from transformers.core_model_loading import revert_weight_conversion

    # the names and per-expert MoE layout save_pretrained writes (and releases use)
    state = revert_weight_conversion(hf, {n: t.detach().cpu() for n, t in export_tensors(hf)})
    kept = write_shards(out, [quantize_state(state)], 1)
    finish_fp8_export(hf.config, model_name, tokenizer, out, kept)
    return out


def write_config(config: dict, out: Path, quant: dict | None) -> None:
    """config.json with ``quant`` as its quantization_config (None removes it); the
    unquantized tensors are bf16 either way."""
    config = {k: v for k, v in config.items() if k != "quantization_config"}
    if quant is not None:
        config["quantization_config"] = quant
    config["torch_dtype" if "torch_dtype" in config else "dtype"] = "bfloat16"
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def copy_assets(src: Path, out: Path) -> None:
    """Everything but the weights and config.json: tokenizer, generation config, templates."""
    for item in src.iterdir():
        if item.name.startswith(".") or item.name in (*_WEIGHT_FILES, "config.json"):
            continue
        if item.suffix in (".safetensors", ".bin", ".pt", ".pth"):
            continue
        if item.is_dir():
            shutil.copytree(item, out / item.name, dirs_exist_ok=True)
        else:
            shutil.copy2(item, out / item.name)


def bf16_to_fp8(src: Path, out: Path, block: int = BLOCK) -> Path:
    """Quantize a bf16 (or float32) model directory to blockwise FP8 in ``out``."""
    what = "convert to-fp8"
    src, out = Path(src), Path(out)
    config = read_config(src, what)
    if "quantization_config" in config:
        method = config["quantization_config"].get("quant_method", "?")
        raise _usage(f"{what}: {src} is already quantized (config.json quantization_config, quant_method {method})")
    files = weight_files(src, what)
    for name in files:
        if _file_has_fp8(src / name):
            raise _usage(f"{what}: {src / name} already holds float8 tensors; the source must be bf16 or float32")
    _check_out(src, out, what)

    def shards():
        for name in files:
            with safe_open(str(src / name), framework="pt") as f:
                tensors = quantize_state({k: f.get_tensor(k) for k in f.keys()}, block)
            yield tensors

    with _staged(out) as tmp:
        kept = write_shards(tmp, shards(), len(files))
        write_config(config, tmp, quantization_config(kept, block))
        copy_assets(src, tmp)
    return out


def fp8_to_bf16(src: Path, out: Path) -> Path:
    """Dequantize a blockwise FP8 directory (prl's, DeepSeek-V3's, GLM's, Qwen3-FP8's) to bf16."""
    what = "convert to-bf16"
    src, out = Path(src), Path(out)
    config = read_config(src, what)
    quant = config.get("quantization_config") or {}
    if quant.get("quant_method") != "fp8" or not quant.get("weight_block_size"):
        raise _usage(f"{what}: {src} is not a blockwise FP8 model (config.json has no fp8 quantization_config)")
    files = weight_files(src, what)
    _check_out(src, out, what)
    # A release may store a weight's scale in another file than the weight itself.
    where = {k: name for name in files for k in _keys(src / name)}

    def shards():
        for name in files:
            with safe_open(str(src / name), framework="pt") as f:
                yield _dequantized(src, f, where, tuple(quant["weight_block_size"]))

    with _staged(out) as tmp:
        write_shards(tmp, shards(), len(files))
        write_config(config, tmp, None)
        copy_assets(src, tmp)
    return out


def _keys(path: Path) -> list[str]:
    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def _dequantized(src: Path, f, where: dict[str, str], block: tuple[int, int]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for key in f.keys():
        if key.endswith(SCALE_SUFFIX):
            continue
        t = f.get_tensor(key)
        scale_key = key + SCALE_SUFFIX
        if t.is_floating_point() and t.element_size() == 1:  # e4m3 (or e5m2): needs its scale
            if scale_key not in where:
                raise _usage(f"convert to-bf16: {src}: {key} is float8 but there is no {scale_key}")
            with safe_open(str(src / where[scale_key]), framework="pt") as g:
                scale = g.get_tensor(scale_key)
            try:
                t = dequantize_block(t, scale, torch.bfloat16, block)
            except ValueError as exc:
                raise _usage(f"convert to-bf16: {src}: {key}: {exc}") from None
        elif t.is_floating_point():
            t = t.to(torch.bfloat16)
        out[key] = t
    return out
