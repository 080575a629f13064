"""The vision half of the ``-vl`` presets: a Qwen3.5 vision tower config and the image
processor files saved beside the tokenizer.

A ``-vl`` model is ``Qwen3_5ForConditionalGeneration`` (model type ``qwen3_5``): the text
preset's hybrid stack as ``text_config`` and a small ViT as ``vision_config``. Images are cut
into ``patch_size`` squares (two time steps each, as for video), encoded, and every
``merge_size`` x ``merge_size`` block of patches becomes one embedding that replaces one
``<|image_pad|>`` token of the prompt.

The processor files are the ones transformers' ``AutoProcessor`` reads for Qwen3.5
(``Qwen3VLProcessor`` over ``Qwen2VLImageProcessor``); ``AutoImageProcessor`` alone reads
``preprocessor_config.json`` and needs only PIL. (transformers builds the video processor,
and so ``AutoProcessor``, only where torchvision is installed.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from prl_model_init.tokenizer import SPECIAL_TOKENS, VISION_TOKENS


@dataclass(frozen=True)
class VisionPreset:
    """Shape of a vision tower. ``max_pixels`` bounds an image's area after resizing (the
    processor scales larger images down, keeping the aspect ratio); ``min_pixels`` scales
    smaller ones up."""

    depth: int = 2
    hidden_size: int = 64
    num_heads: int = 2
    intermediate_size: int = 128
    patch_size: int = 8
    merge_size: int = 2
    temporal_patch_size: int = 2
    # a 16 x 16 grid of learned positions, resampled to each image's patch grid
    num_position_embeddings: int = 256
    min_pixels: int = 32 * 32
    max_pixels: int = 128 * 128


# CLIP's normalisation, the one the published Qwen-VL processors use.
_MEAN = [0.48145466, 0.4578275, 0.40821073]
_STD = [0.26862954, 0.26130258, 0.27577711]


def vision_token_ids() -> dict[str, int]:
    """Ids of the vision markers in a ``-vl`` tokenizer (right after the text specials)."""
    base = 256 + len(SPECIAL_TOKENS)
    return {name: base + i for i, (name, _) in enumerate(VISION_TOKENS)}


def vl_config(text_config, vision: VisionPreset):
    """A ``Qwen3_5Config`` around a text preset's ``Qwen3_5TextConfig``; the tower's output
    width is the text hidden size so merged patches drop straight into the token stream."""
    from transformers import Qwen3_5Config

    ids = vision_token_ids()
    text = text_config.to_dict()
    marker = text.pop("prl_renderer", None)
    cfg = Qwen3_5Config(
        text_config=text,
        vision_config={
            "depth": vision.depth,
            "hidden_size": vision.hidden_size,
            "num_heads": vision.num_heads,
            "intermediate_size": vision.intermediate_size,
            "patch_size": vision.patch_size,
            "spatial_merge_size": vision.merge_size,
            "temporal_patch_size": vision.temporal_patch_size,
            "out_hidden_size": text_config.hidden_size,
            "num_position_embeddings": vision.num_position_embeddings,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=text_config.tie_word_embeddings,
        eos_token_id=text_config.eos_token_id,
        pad_token_id=text_config.pad_token_id,
    )
    if marker is not None:
        cfg.prl_renderer = marker
    return cfg


def _image_processor_dict(vision: VisionPreset) -> dict:
    return {
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": _MEAN,
        "image_std": _STD,
        "merge_size": vision.merge_size,
        "patch_size": vision.patch_size,
        "temporal_patch_size": vision.temporal_patch_size,
        "resample": 3,  # bicubic
        "rescale_factor": 1 / 255,
        "size": {"shortest_edge": vision.min_pixels, "longest_edge": vision.max_pixels},
    }


def save_processor(out: Path, vision: VisionPreset, chat_template: str) -> None:
    """Write ``preprocessor_config.json`` (images), ``video_preprocessor_config.json`` and
    ``processor_config.json`` next to the tokenizer files, plus the chat template the
    processor applies (``chat_template.jinja``, the tokenizer's own)."""
    image = {"image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen3VLProcessor"}
    image |= _image_processor_dict(vision)
    video = {"video_processor_type": "Qwen3VLVideoProcessor", "processor_class": "Qwen3VLProcessor"}
    video |= _image_processor_dict(vision)
    for name, body in [
        ("preprocessor_config.json", image),
        ("video_preprocessor_config.json", video),
        ("processor_config.json", {"processor_class": "Qwen3VLProcessor"}),
    ]:
        (out / name).write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    if not (out / "chat_template.jinja").exists():
        (out / "chat_template.jinja").write_text(chat_template)
