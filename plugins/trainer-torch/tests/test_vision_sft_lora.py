"""``[model.lora]`` with ``[model.vlm]`` in SFT: an adapter on the image-text model's
language model only (prl_trainer_torch.vision_policy.lora_root), exported merged."""

from __future__ import annotations

import json

import torch
from prl_trainer_torch.export import export_checkpoint
from prl_trainer_torch.vision_sft import VisionSFTRun

from prl.config.policy import VLMConfig
from prl.config.sections import LoraConfig
from prl.testing.images import png_url


def _image_data(tmp_path):
    rows = []
    for colour in ("red", "green", "blue") * 2:
        user = [{"type": "image_url", "image_url": {"url": png_url(colour)}}, {"type": "text", "text": "Colour?"}]
        rows.append({"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": colour}]})
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_lora_trains_an_adapter_on_the_language_model_and_merges(tmp_path, sft_config):
    """[model.lora] with [model.vlm]: only adapters on the language model's projections
    train (the tower too stays as loaded, though freeze_vision_encoder is false), and the
    adapter-only checkpoint exports merged into an image-text model that computes what the
    adapted one does."""
    from prl_model_init import make_model
    from transformers import AutoModelForImageTextToText

    vl_model = make_model(tmp_path / "vl", "tiny-qwen3.5-vl", seed=0)
    data = {"seq_len": 96, "batch_size": 2, "micro_batch_size": 1, "shuffle": False}
    cfg = sft_config(tmp_path, vl_model, _image_data(tmp_path), data=data, max_steps=2, ckpt={}, optim={"lr": 2e-2})
    cfg.model.vlm = VLMConfig(freeze_vision_encoder=False)
    cfg.model.lora = LoraConfig(rank=4, alpha=8.0, target_modules=["q_proj", "v_proj", "in_proj_qkv"])
    run = VisionSFTRun(cfg)
    try:
        assert run.adapter is not None and all(".visual." not in f".{m}" for m in run.adapter.modules)
        before = {k: v.detach().clone() for k, v in run.hf.state_dict().items()}
        run.train()
        trained = {k: v.detach().clone() for k, v in run.hf.state_dict().items()}
    finally:
        run.close()
    changed = {k for k in trained if not torch.equal(before[k], trained[k])}
    assert changed and all(".lora_B" in k or ".lora_A" in k for k in changed), sorted(changed)[:4]
    assert {k.split(".")[-3] for k in changed if ".lora_B" in k} == {"q_proj", "v_proj", "in_proj_qkv"}
    assert all(".language_model." in k for k in changed)
    step = tmp_path / "outputs" / "t" / "checkpoints" / "step_2"
    merged = AutoModelForImageTextToText.from_pretrained(
        export_checkpoint(step, tmp_path / "hf", "float32", merge_lora=True)
    )
    ids = torch.tensor([[5, 17, 42, 99, 7, 3, 250, 11]])
    with torch.no_grad():
        want, got = run.hf.eval()(input_ids=ids).logits, merged(input_ids=ids).logits
        base = AutoModelForImageTextToText.from_pretrained(vl_model)(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(got, base, atol=1e-3)  # the adapter changed what the model computes
