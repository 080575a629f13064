"""The architecture check on checkpoint-layout MoE weights, beyond the fit of a whole
checkpoint (test_weights_moe.py): what it says about experts that cannot be fused, about a
file holding only expert tensors, and that checking a huge checkpoint allocates nothing."""

from __future__ import annotations

import pytest
import torch
from prl_inference_torch.weights import architecture_mismatch, model_layout


def _moe(experts: int = 4, seed: int = 0):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, moe_intermediate_size=8, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_experts=experts, num_experts_per_tok=2,
    )  # fmt: skip
    torch.manual_seed(seed)
    return Qwen3MoeForCausalLM(cfg).eval()


def _checkpoint(model) -> dict[str, torch.Tensor]:
    from transformers.core_model_loading import revert_weight_conversion

    return revert_weight_conversion(model, model.state_dict())


def test_experts_that_cannot_be_fused_name_the_fused_tensor():
    served = _moe()
    files = _checkpoint(_moe(seed=1))
    files["model.layers.0.mlp.experts.2.up_proj.weight"] = torch.zeros(9, 16)
    with pytest.raises(ValueError) as err:
        model_layout(files, served)
    # the user learns which of the served model's tensors the experts were to fill
    assert str(err.value).startswith("model.layers.0.mlp.experts.gate_up_proj: ")
    shapes = {k: tuple(v.shape) for k, v in files.items()}
    problem = architecture_mismatch(shapes, served)
    assert problem.startswith("not the served model's checkpoint layout: model.layers.0.mlp.experts.gate_up_proj: ")


def test_a_file_of_expert_tensors_only_is_converted_then_found_incomplete():
    served = _moe()
    experts = {k: tuple(v.shape) for k, v in _checkpoint(_moe(seed=1)).items() if ".experts." in k}
    assert experts and not any(k in served.state_dict() for k in experts)
    problem = architecture_mismatch(experts, served)
    # converted to the fused tensors, which fit: what is wrong is everything else missing
    assert problem.startswith("missing: "), problem
    assert "unexpected" not in problem and "experts" not in problem


def test_checking_a_huge_checkpoint_allocates_no_memory():
    # A 4-expert layer of a model whose experts are 2**20 x 2**16 floats (256 GiB each):
    # the check runs on shapes alone, so it answers instead of failing to allocate.
    served = _moe()
    big = (1 << 20, 1 << 16)
    shapes = {f"model.layers.0.mlp.experts.{e}.{p}.weight": big for e in range(4) for p in ("gate_proj", "up_proj")}
    problem = architecture_mismatch(shapes, served)
    assert problem.startswith("shape mismatch: model.layers.0.mlp.experts.gate_up_proj"), problem
