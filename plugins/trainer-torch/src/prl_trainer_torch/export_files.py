"""Pieces every export shares (bf16, FP8, one process or torchrun ranks): where a
checkpoint came from, whether it is complete, the tensors ``save_pretrained`` would write,
and the files written beside the weights (config, generation config, tokenizer)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    "added_tokens.json",
    "generation_config.json",
    # a vision-language model's image (and video) processor: the export sees images as the source did
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
)


def model_source(step_dir: Path) -> tuple[str, str]:
    """(model name or directory, tokenizer name or directory) the checkpoint was trained from."""
    run_dir = step_dir.parent.parent
    for name in ("sft.json", "trainer.json"):
        path = run_dir / "configs" / "latest" / "resolved" / name
        if path.exists():
            cfg = json.loads(path.read_text())
            model = cfg["model"]["name"]
            return model, (cfg.get("tokenizer") or {}).get("name") or model
    side = step_dir / "trainer" / "model.json"
    if side.exists():
        cfg = json.loads(side.read_text())
        return cfg["model"], cfg.get("tokenizer") or cfg["model"]
    raise FileNotFoundError(f"export: no resolved config under {run_dir}/configs/latest/resolved and no {side}")


def check_checkpoint(step_dir: Path) -> None:
    if not (Path(step_dir) / "trainer" / ".metadata").exists():
        raise FileNotFoundError(f"export: {step_dir} has no complete trainer checkpoint (trainer/.metadata)")


def is_image_text(step_dir: Path) -> bool:
    """Whether the checkpoint is of an image-text model: it holds a vision tower (a
    ``[model.vlm]`` run trains the whole model; a text run of the same model holds its
    language model only), or it is a LoRA adapter on such a model's language model."""
    import torch.distributed.checkpoint as dcp

    keys = dcp.FileSystemReader(str(Path(step_dir) / "trainer")).read_metadata().state_dict_metadata
    return any(k.startswith("model.") and (".visual." in k or ".language_model." in k) for k in keys)


def export_tensors(hf: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """What ``save_pretrained`` writes: parameters once each (a tied output matrix is the
    input embedding) and persistent buffers."""
    params = dict(hf.named_parameters())  # duplicates (tied weights) removed
    every_param = {n for n, _ in hf.named_parameters(remove_duplicate=False)}
    state = hf.state_dict()
    return [(n, t) for n, t in state.items() if n in params or n not in every_param]


def write_side_files(config, model_name: str, tokenizer: str, out: Path, dtype: torch.dtype) -> None:
    """What ``save_pretrained`` writes besides the weights: config (in the export dtype),
    generation config when the source has one, and the tokenizer."""
    from transformers import GenerationConfig

    config.use_cache = True
    config.torch_dtype = dtype
    config.save_pretrained(out)
    try:
        GenerationConfig.from_pretrained(model_name).save_pretrained(out)
    except OSError:
        pass  # the source has no generation_config.json
    copy_tokenizer(tokenizer, out)


def copy_tokenizer(tokenizer: str, out: Path) -> None:
    src = Path(tokenizer)
    if src.is_dir():
        for name in TOKENIZER_FILES:
            if (src / name).exists() and not (out / name).exists():
                shutil.copy2(src / name, out / name)
    else:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(tokenizer).save_pretrained(out)
