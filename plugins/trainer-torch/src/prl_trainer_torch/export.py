"""Export a DCP trainer checkpoint to a Hugging Face model directory.

``checkpoints/step_N`` -> ``step_N/weights/`` (or a given directory): safetensors weights
in the chosen dtype (bf16 by default; ``fp8`` writes blockwise FP8 to ``step_N/weights-FP8/``,
see :mod:`prl_trainer_torch.fp8`), ``config.json``, ``generation_config.json`` when the
source has one, and the tokenizer files, so transformers and the inference backends load
it directly. A LoRA checkpoint is refused unless ``--merge-lora`` asks for the adapter to be
merged into the base weights. The model architecture and tokenizer come from the run's resolved config
(``configs/latest/resolved/sft.json`` or ``trainer.json``), falling back to the
``model.json`` the trainer writes beside every checkpoint.

``num_workers > 1`` (``prl export --num-workers N``) exports through N torchrun ranks that
each hold 1/N of the model, for checkpoints too large for one process
(:mod:`prl_trainer_torch.export_dist`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict

from prl.config.errors import ConfigError
from prl_trainer_torch.checkpoint import ADAPTER_CONFIG, single_process_quiet
from prl_trainer_torch.export_files import check_checkpoint, copy_tokenizer, is_image_text, model_source
from prl_trainer_torch.lora import apply_lora, is_adapter_key
from prl_trainer_torch.lora import merge_lora as merge_lora_into
from prl_trainer_torch.vision_policy import lora_root


def export_checkpoint(
    step_dir: Path, out: Path | None = None, dtype: str = "bfloat16", num_workers: int = 1, merge_lora: bool = False
) -> Path:
    """Write the HF export of ``step_dir`` and return its directory; with ``num_workers > 1``
    through that many torchrun ranks, each holding a shard (:mod:`prl_trainer_torch.export_dist`).

    A LoRA checkpoint holds only the adapter: it is exported only with ``merge_lora``, which
    folds the adapter into the base model's weights (W + alpha/r B A) in float32 first."""
    from transformers import AutoModelForCausalLM

    step_dir = Path(step_dir)
    check_checkpoint(step_dir)
    lora = _lora_config(step_dir)
    if lora is not None and not merge_lora:
        raise ConfigError(
            f"export: {step_dir} is a LoRA checkpoint (adapter only): pass --merge-lora to write the base model "
            "with the adapter merged in",
            "Usage error",
        )
    if lora is None and merge_lora:
        raise ConfigError(f"export: --merge-lora: {step_dir} is not a LoRA checkpoint", "Usage error")
    out = Path(out) if out else step_dir / ("weights-FP8" if dtype == "fp8" else "weights")
    if num_workers > 1:
        if lora is not None:
            raise ConfigError("export: --merge-lora runs in one process; leave out --num-workers", "Usage error")
        if is_image_text(step_dir):
            raise ConfigError(
                "export: a vision-language checkpoint exports in one process; leave out --num-workers", "Usage error"
            )
        return _export_under_torchrun(step_dir, out, dtype, num_workers)
    model_name, tokenizer = model_source(step_dir)
    vision = is_image_text(step_dir)
    if vision:
        if dtype == "fp8":
            raise ConfigError(
                "export: --dtype fp8 is for text models; this checkpoint has a vision tower", "Usage error"
            )
        from transformers import AutoModelForImageTextToText as model_class  # a [model.vlm] run's checkpoint
    else:
        model_class = AutoModelForCausalLM
    hf = model_class.from_pretrained(model_name, dtype=torch.float32)
    if lora is not None:  # where the run put it: an image-text model's adapter is on its language model
        apply_lora(lora_root(hf) if vision else hf, _LoraSettings.of(lora))
    opts = StateDictOptions(full_state_dict=False, strict=lora is None)
    state = {"model": get_model_state_dict(hf, options=opts)}
    if lora is not None:
        state["model"] = {k: v for k, v in state["model"].items() if is_adapter_key(k)}
    with single_process_quiet():
        dcp.load(state, checkpoint_id=str(step_dir / "trainer"))
    set_model_state_dict(hf, state["model"], options=opts)
    if lora is not None:
        merge_lora_into(hf)
    if dtype == "fp8":
        from prl_trainer_torch.fp8_convert import save_fp8_model

        return save_fp8_model(hf, model_name, tokenizer, out)
    hf.to({"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype])
    hf.config.use_cache = True
    out.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(out, safe_serialization=True)
    copy_tokenizer(tokenizer, out)
    return out


class _LoraSettings:
    """The [model.lora] fields an export needs, read back from ``adapter_config.json``."""

    def __init__(self, rank: int, alpha: float, target_modules: list[str]) -> None:
        self.rank, self.alpha, self.dropout, self.target_modules = rank, alpha, 0.0, target_modules

    @classmethod
    def of(cls, cfg: dict) -> _LoraSettings:
        return cls(int(cfg["r"]), float(cfg["lora_alpha"]), list(cfg["target_modules"]))


def _lora_config(step_dir: Path) -> dict | None:
    path = step_dir / "trainer" / ADAPTER_CONFIG
    return json.loads(path.read_text()) if path.exists() else None


def _export_under_torchrun(step_dir: Path, out: Path, dtype: str, num_workers: int) -> Path:
    from prl_trainer_torch.trainer import launch_torchrun

    job = json.dumps({"checkpoint": str(step_dir.resolve()), "out": str(out.resolve()), "dtype": dtype})
    code = launch_torchrun(job, num_workers, "prl_trainer_torch.export_dist")
    if code != 0:
        raise RuntimeError(f"export: the {num_workers} export ranks failed (exit code {code}); see their output above")
    return out
