"""Vision-language models in the trainer: which model types ``[model.vlm]`` may name, and
the resolve-time checks of the section against a model's own files (no torch needed).

A model is a registered VLM when its ``config.json`` ``model_type`` is one of
``VLM_MODEL_TYPES``: the Qwen3.5 (dense and MoE) and Qwen3-VL families, whose vision tower
is ``model.visual`` and whose processors cut images into merged patch tokens. A VLM run
without ``[model.vlm]`` is fine: it is trained on text only.
"""

from __future__ import annotations

import json
from pathlib import Path

# config.json model_type -> the transformers class that holds the vision tower
VLM_MODEL_TYPES: dict[str, str] = {
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
    "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
    "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration",
}


def check_vlm(vlm, name: str, model_dir: Path, config: dict) -> None:
    """Raise ValueError as ``vlm...: why`` when ``[model.vlm]`` cannot apply to the model in
    ``model_dir`` (its parsed ``config.json`` is ``config``): not a registered VLM class,
    or a pixel bound below one image token of its processor."""
    model_type = config.get("model_type")
    if model_type not in VLM_MODEL_TYPES:
        raise ValueError(
            f"vlm: {name} is not a vision-language model prl can train (config.json model_type "
            f"{model_type!r}; registered: {', '.join(VLM_MODEL_TYPES)})"
        )
    try:
        proc = json.loads((model_dir / "preprocessor_config.json").read_text())
        token = int(proc["patch_size"]) * int(proc.get("merge_size", 1))
    except (OSError, ValueError, KeyError, TypeError):
        return  # no readable image processor config: the processor checks at load
    for field in ("min_pixels", "max_pixels"):
        value = getattr(vlm, field)
        if value is not None and value < token * token:
            least = f"{token}x{token} = {token * token} pixels"
            raise ValueError(f"vlm.{field}: {value} is less than one image token of {name} ({least})")
