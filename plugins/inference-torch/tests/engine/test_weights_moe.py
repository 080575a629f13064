"""Weights of an MoE model in the checkpoint layout (one 2-D tensor per expert, what the
trainer publishes and ``save_pretrained`` writes) land in the served model's fused 3-D
expert tensors, each expert at its own index; weights that do not fill every expert are
refused before anything changes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from prl_inference_torch.weights import WeightError, architecture_mismatch, model_layout, read_weights
from safetensors.torch import load_file, save_file


def _moe(experts: int, seed: int = 0):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, moe_intermediate_size=8, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_experts=experts, num_experts_per_tok=2,
    )  # fmt: skip
    torch.manual_seed(seed)
    return Qwen3MoeForCausalLM(cfg).eval()


def test_every_expert_lands_at_its_own_index():
    """Twelve experts: 10 and 11 sort before 2 as text, yet must stack after 9."""
    from transformers.core_model_loading import revert_weight_conversion

    served, trained = _moe(12, seed=0), _moe(12, seed=1)
    files = revert_weight_conversion(trained, trained.state_dict())
    assert "model.layers.1.mlp.experts.11.down_proj.weight" in files
    keys = list(files)
    random.Random(0).shuffle(keys)
    got = model_layout({k: files[k] for k in keys}, served)
    want = trained.state_dict()
    assert sorted(got) == sorted(want)
    for name, tensor in got.items():
        assert torch.equal(tensor, want[name]), name


def test_the_served_layout_passes_through_untouched():
    served = _moe(4)
    state = served.state_dict()
    assert model_layout(state, served) is state


def test_a_published_directory_is_read_into_the_fused_layout(tmp_path):
    from transformers.core_model_loading import revert_weight_conversion

    served, trained = _moe(4, seed=0), _moe(4, seed=1)
    save_file(revert_weight_conversion(trained, trained.state_dict()), str(tmp_path / "model.safetensors"))
    got = read_weights(str(tmp_path), served)
    assert got["model.layers.0.mlp.experts.gate_up_proj"].shape == (4, 16, 16)
    for name, tensor in got.items():
        assert torch.equal(tensor, trained.state_dict()[name]), name


def test_a_missing_or_misshapen_expert_is_named(tmp_path):
    from transformers.core_model_loading import revert_weight_conversion

    served, trained = _moe(4, seed=0), _moe(4, seed=1)
    files = revert_weight_conversion(trained, trained.state_dict())
    shapes = {k: tuple(v.shape) for k, v in files.items()}
    assert architecture_mismatch(shapes, served) is None
    missing = {k: v for k, v in shapes.items() if k != "model.layers.1.mlp.experts.3.down_proj.weight"}
    assert architecture_mismatch(missing, served) == "shape mismatch: model.layers.1.mlp.experts.down_proj"
    wide = {**shapes, "model.layers.0.mlp.experts.2.up_proj.weight": (9, 16)}
    assert architecture_mismatch(wide, served).startswith("not the served model's checkpoint layout: ")
    save_file({k: v.contiguous() for k, v in files.items() if k in missing}, str(tmp_path / "model.safetensors"))
    before = served.state_dict()["model.layers.1.mlp.experts.down_proj"].clone()
    with pytest.raises(WeightError, match=r"architecture \(shape mismatch: model.layers.1.mlp.experts.down_proj\)"):
        read_weights(str(tmp_path), served)
    assert torch.equal(served.state_dict()["model.layers.1.mlp.experts.down_proj"], before)


def test_tiny_moe_checkpoint_reads_as_from_pretrained_loads_it(tmp_path):
    from prl_model_init import make_model
    from transformers import AutoModelForCausalLM

    base, other = (make_model(tmp_path / f"s{s}", "tiny-moe", seed=s) for s in (0, 1))
    assert "model.layers.2.mlp.experts.5.up_proj.weight" in load_file(str(Path(other) / "model.safetensors"))
    got = read_weights(str(other), AutoModelForCausalLM.from_pretrained(base))
    want = AutoModelForCausalLM.from_pretrained(other).state_dict()
    assert all(torch.equal(t, want[k]) for k, t in got.items()) and "model.layers.2.mlp.experts.gate_up_proj" in got
