"""Weight and adapter directories are checked against the served model before loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from prl_inference_vllm.weights import WeightError, check_lora_dir, check_weight_dir, checkpoint_shapes
from safetensors.torch import save_file

SERVED_CONFIG = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 8, "vocab_size": 16, "tie_word_embeddings": True}
TENSORS = {"model.embed_tokens.weight": (16, 8), "model.norm.weight": (8,)}


def write(d: Path, tensors: dict, config: dict | None = None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    save_file({k: torch.zeros(s) for k, s in tensors.items()}, str(d / "model.safetensors"))
    if config is not None:
        (d / "config.json").write_text(json.dumps(config))
    return d


@pytest.fixture
def served(tmp_path: Path) -> dict:
    return checkpoint_shapes(write(tmp_path / "served", TENSORS, SERVED_CONFIG))


def test_headers_are_read_without_loading_tensors(served: dict) -> None:
    assert served == {"model.embed_tokens.weight": [16, 8], "model.norm.weight": [8]}


def test_matching_directory_passes_and_a_tied_head_is_tolerated(tmp_path: Path, served: dict) -> None:
    ok = write(tmp_path / "ok", {**TENSORS, "lm_head.weight": (16, 8)}, SERVED_CONFIG)
    assert check_weight_dir(str(ok), SERVED_CONFIG, served) == ok


@pytest.mark.parametrize(
    "tensors, config, message",
    [
        ({"model.embed_tokens.weight": (16, 4), "model.norm.weight": (8,)}, None, "has shape \\[16, 4\\]"),
        ({"model.embed_tokens.weight": (16, 8)}, None, "'model.norm.weight' of the served model is missing"),
        ({**TENSORS, "model.extra.weight": (2,)}, None, "'model.extra.weight' is not in the served model"),
        (TENSORS, {**SERVED_CONFIG, "architectures": ["LlamaForCausalLM"]}, "architecture"),
        (TENSORS, {**SERVED_CONFIG, "hidden_size": 16}, "hidden_size=16 differs"),
    ],
)
def test_mismatched_directories_are_refused(tmp_path: Path, served: dict, tensors, config, message) -> None:
    bad = write(tmp_path / "bad", tensors, config)
    with pytest.raises(WeightError, match=message):
        check_weight_dir(str(bad), SERVED_CONFIG, served)


def test_missing_or_empty_directories_are_refused(tmp_path: Path, served: dict) -> None:
    with pytest.raises(WeightError, match="is not a directory"):
        check_weight_dir(str(tmp_path / "nope"), SERVED_CONFIG, served)
    (tmp_path / "empty").mkdir()
    with pytest.raises(WeightError, match="no \\*.safetensors"):
        check_weight_dir(str(tmp_path / "empty"), SERVED_CONFIG, served)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "model.safetensors").write_bytes(b"\x01\x00")
    with pytest.raises(WeightError, match="not a readable safetensors file"):
        check_weight_dir(str(tmp_path / "junk"), SERVED_CONFIG, served)


def test_lora_directory_needs_config_and_weights(tmp_path: Path) -> None:
    with pytest.raises(WeightError, match="no adapter_config.json"):
        check_lora_dir(str(tmp_path))
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(WeightError, match="no adapter_model"):
        check_lora_dir(str(tmp_path))
    (tmp_path / "adapter_model.safetensors").write_bytes(b"")
    assert check_lora_dir(str(tmp_path)) == tmp_path
