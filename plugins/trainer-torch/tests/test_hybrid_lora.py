"""LoRA on the Qwen3.5 hybrid preset: target modules may name the Gated DeltaNet projections
(``in_proj_qkv``, ``in_proj_z``, ``out_proj``) beside the full-attention ones; packed SFT
trains both kinds of adapter and nothing else, and the merged export computes what the
adapted model computes."""

from __future__ import annotations

import pytest
import torch
from prl_trainer_torch import hybrid
from prl_trainer_torch.export import export_checkpoint
from prl_trainer_torch.sft import SFTRun

from prl.config.sections import LoraConfig

TARGETS = ["q_proj", "v_proj", "in_proj_qkv", "in_proj_z", "out_proj"]


@pytest.fixture(scope="module")
def hybrid_model(tmp_path_factory):
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-qwen3.5", "tiny-qwen3.5", seed=0)


@pytest.mark.slow  # an SFT run and an export
def test_lora_on_gated_deltanet_and_attention_trains_packed_and_merges(tmp_path, hybrid_model, reverse_data,
                                                                     sft_config, monkeypatch):  # fmt: skip
    from transformers import AutoModelForCausalLM

    packed = []
    stock = hybrid.packed_forward
    monkeypatch.setattr(hybrid, "packed_forward", lambda mod, h, cu, *a: packed.append(1) or stock(mod, h, cu, *a))
    cfg = sft_config(tmp_path, hybrid_model, reverse_data[0], max_steps=2, ckpt={}, optim={"lr": 2e-2},
                     data={"seq_len": 256, "batch_size": 2})  # fmt: skip
    cfg.model.lora = LoraConfig(rank=4, alpha=8.0, target_modules=TARGETS)
    run = SFTRun(cfg)
    try:
        kinds = {name.split(".")[-2] for name in run.adapter.modules}
        assert kinds == {"linear_attn", "self_attn"}, sorted(run.adapter.modules)[:4]
        before = {k: v.detach().clone() for k, v in run.hf.state_dict().items()}
        run.train()
        trained = {k: v.detach().clone() for k, v in run.hf.state_dict().items()}
    finally:
        run.close()
    assert packed  # the Gated DeltaNet layers ran packed, through their adapted projections
    learned = {k.split(".")[-3] for k in trained if ".lora_B" in k and not torch.equal(before[k], trained[k])}
    assert learned == {"q_proj", "v_proj", "in_proj_qkv", "in_proj_z", "out_proj"}
    frozen = [k for k in trained if ".lora_" not in k and not torch.equal(before[k], trained[k])]
    assert frozen == []
    step = tmp_path / "outputs" / "t" / "checkpoints" / "step_2"
    merged = AutoModelForCausalLM.from_pretrained(export_checkpoint(step, tmp_path / "hf", "float32", merge_lora=True))
    ids = torch.tensor([[5, 17, 42, 99, 7, 3, 250, 11]])
    adapted = run.hf.eval()
    with torch.no_grad():
        want, got = adapted(input_ids=ids).logits, merged(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(hybrid_model)(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(got, base, atol=1e-3)  # the adapter changed what the model computes
