"""Export a DCP trainer checkpoint to a Hugging Face model directory.

``checkpoints/step_N`` -> ``step_N/weights/`` (or a given directory): safetensors weights
in the chosen dtype (bf16 by default), ``config.json``, ``generation_config.json`` when the
source has one, and the tokenizer files, so transformers and the inference backends load
it directly. The model architecture and tokenizer come from the run's resolved config
(``configs/latest/resolved/sft.json`` or ``trainer.json``), falling back to the
``model.json`` the trainer writes beside every checkpoint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict

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


def export_checkpoint(step_dir: Path, out: Path | None = None, dtype: str = "bfloat16") -> Path:
    """Write the HF export of ``step_dir`` and return its directory."""
    from transformers import AutoModelForCausalLM

    step_dir = Path(step_dir)
    if not (step_dir / "trainer" / ".metadata").exists():
        raise FileNotFoundError(f"export: {step_dir} has no complete trainer checkpoint (trainer/.metadata)")
    out = Path(out) if out else step_dir / "weights"
    model_name, tokenizer = model_source(step_dir)
    hf = AutoModelForCausalLM.from_pretrained(model_name, dtype=torch.float32)
    opts = StateDictOptions(full_state_dict=False)
    state = {"model": get_model_state_dict(hf, options=opts)}
    dcp.load(state, checkpoint_id=str(step_dir / "trainer"))
    set_model_state_dict(hf, state["model"], options=opts)
    hf.to({"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype])
    hf.config.use_cache = True
    out.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(out, safe_serialization=True)
    src = Path(tokenizer)
    if src.is_dir():
        for name in TOKENIZER_FILES:
            if (src / name).exists() and not (out / name).exists():
                shutil.copy2(src / name, out / name)
    else:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(tokenizer).save_pretrained(out)
    return out
