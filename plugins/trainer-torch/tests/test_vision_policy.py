"""The VLM policy forward (prl_trainer_torch.vision_policy) on tiny-qwen3.5-vl with samples
from prl_trainer_torch.vision_rows: its target logprobs match the model's own logits, the
pixels change them, and a few steps learn while the frozen vision tower stays put."""

from __future__ import annotations

import base64
import io

import pytest
import torch
from PIL import Image, ImageDraw
from prl_trainer_torch.vision_inputs import vision_tower
from prl_trainer_torch.vision_policy import VisionPolicy, load_vision_model
from prl_trainer_torch.vision_rows import VisionRowRenderer

from prl.config.policy import VLMConfig
from prl.config.roots import SFTDataConfig
from prl.plugins import get_registry


def _row(colour: str, answer: str) -> dict:
    img = Image.new("RGB", (64, 64), "white")
    ImageDraw.Draw(img).ellipse((16, 16, 48, 48), fill=colour)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    user = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Colour?"}]
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]}


@pytest.fixture(scope="module")
def vl_model(tmp_path_factory):
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "vl", "tiny-qwen3.5-vl", seed=0)


@pytest.fixture(scope="module")
def rows(vl_model):
    renderer = get_registry().get("renderers", "qwen3").Config()
    return VisionRowRenderer(SFTDataConfig(name="unused"), renderer, str(vl_model), VLMConfig())


def _tensors(s):
    return torch.tensor([s.inputs]), torch.tensor([s.targets]), torch.tensor([s.mask])


def test_logprobs_match_the_models_logits_and_see_the_image(rows, vl_model):
    hf = load_vision_model(str(vl_model), torch.float32, VLMConfig()).eval()
    policy = VisionPolicy(hf)
    red, blue = rows.sample(_row("red", "red"), 0, 512), rows.sample(_row("blue", "red"), 1, 512)
    ids, tgt, _ = _tensors(red)
    with torch.no_grad():
        logp, _ = policy(ids, tgt, red.pixels)
        ref = hf(
            input_ids=ids,
            mm_token_type_ids=(ids == hf.config.image_token_id).int(),
            pixel_values=red.pixels.pixel_values,
            image_grid_thw=red.pixels.image_grid_thw,
        ).logits.log_softmax(-1)
        other, _ = policy(*_tensors(blue)[:2], blue.pixels)
    torch.testing.assert_close(logp, ref.gather(-1, tgt[..., None])[..., 0], rtol=1e-4, atol=1e-4)
    # same tokens (both answers "red"), different pixels: different logprobs
    assert red.inputs == blue.inputs and (logp - other).abs().max() > 1e-5


@pytest.mark.parametrize("freeze", [True, False])
def test_steps_learn_and_the_tower_follows_freeze(rows, vl_model, freeze):
    hf = load_vision_model(str(vl_model), torch.float32, VLMConfig(freeze_vision_encoder=freeze))
    policy = VisionPolicy(hf)
    before = {k: v.clone() for k, v in vision_tower(hf).state_dict().items()}
    opt = torch.optim.AdamW([p for p in hf.parameters() if p.requires_grad], lr=1e-2)
    s = rows.sample(_row("red", "a red circle"), 0, 512)
    ids, tgt, mask = _tensors(s)
    losses = []
    for _ in range(5):
        logp, _ = policy(ids, tgt, s.pixels)
        loss = -(logp * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5, losses
    moved = [not torch.equal(v, vision_tower(hf).state_dict()[k]) for k, v in before.items()]
    assert (not any(moved)) if freeze else any(moved)
