"""SFT rows with images through the configured renderer (prl_trainer_torch.vision_rows):
image tokens widened and untrained, pixels kept beside the tokens and reaching the loss,
and a row with a broken image skipped and counted instead of failing the run."""

from __future__ import annotations

import base64
import io

import pytest
import torch
from PIL import Image, ImageDraw
from prl_trainer_torch.vision_rows import SkippedImages, VisionRowRenderer

from prl.config.policy import VLMConfig
from prl.config.roots import SFTDataConfig
from prl.plugins import get_registry


def _shape(colour: str) -> Image.Image:
    img = Image.new("RGB", (64, 64), "white")
    ImageDraw.Draw(img).ellipse((16, 16, 48, 48), fill=colour)
    return img


def _url(img: Image.Image) -> str:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _row(url: str, answer: str = "a red circle") -> dict:
    user = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What is it?"}]
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]}


@pytest.fixture(scope="module")
def vl_model(tmp_path_factory):
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "vl", "tiny-qwen3.5-vl", seed=0)


@pytest.fixture(scope="module")
def rows(vl_model):
    renderer = get_registry().get("renderers", "qwen3").Config()
    return VisionRowRenderer(SFTDataConfig(name="unused"), renderer, str(vl_model), VLMConfig())


def test_image_tokens_are_widened_and_carry_no_loss(rows):
    s = rows.sample(_row(_url(_shape("red"))), 0, 512)
    image = [t == rows.image_token_id for t in s.inputs]
    assert sum(image) == 16 and s.pixels.image_grid_thw.tolist() == [[1, 8, 8]]
    # a target that is an image token is never trained, and the answer is
    assert not any(m for t, m in zip(s.targets, s.mask, strict=True) if t == rows.image_token_id)
    assert any(s.mask) and len(s.inputs) == len(s.targets) == len(s.mask)


def test_a_text_row_has_no_pixels(rows):
    s = rows.sample({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}, 0, 64)
    assert s.pixels is None and rows.image_token_id not in s.inputs


@pytest.mark.parametrize("url", ["data:image/png;base64,!!!", "/nonexistent/x.png"])
def test_a_broken_image_skips_the_row_and_counts_it(vl_model, url):
    renderer = get_registry().get("renderers", "qwen3").Config()
    rr = VisionRowRenderer(SFTDataConfig(name="unused"), renderer, str(vl_model), VLMConfig())
    assert rr.sample(_row(url), 3, 512) is None
    assert rr.sample(_row(_url(_shape("red"))), 4, 512) is not None  # the next row still works
    assert rr.skipped.unreadable == 1 and rr.skipped.total == 1
    assert "row 3: image" in rr.skipped.summary() and "\n" not in rr.skipped.summary()


def test_an_image_past_the_pixel_limit_is_skipped(vl_model, monkeypatch):
    renderer = get_registry().get("renderers", "qwen3").Config()
    rr = VisionRowRenderer(SFTDataConfig(name="unused"), renderer, str(vl_model), VLMConfig())
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 64x64 is past twice this: a "bomb"
    assert rr.sample(_row(_url(_shape("red"))), 5, 512) is None
    assert rr.skipped.unreadable == 1 and "row 5: image" in rr.skipped.summary()


def test_image_tokens_past_seq_len_skip_the_row(rows):
    before = rows.skipped.too_long
    assert rows.sample(_row(_url(_shape("red"))), 7, 8) is None
    assert rows.skipped.too_long == before + 1


def test_nothing_skipped_says_nothing():
    assert SkippedImages().summary() is None


def test_the_pixels_reach_the_loss(rows, vl_model):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(vl_model).eval()

    def loss(colour: str) -> float:
        s = rows.sample(_row(_url(_shape(colour))), 0, 512)
        ids, tgt = torch.tensor([s.inputs]), torch.tensor([s.targets])
        with torch.no_grad():
            out = model(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                mm_token_type_ids=(ids == rows.image_token_id).int(),
                pixel_values=s.pixels.pixel_values,
                image_grid_thw=s.pixels.image_grid_thw,
            )
        nll = torch.nn.functional.cross_entropy(out.logits[0], tgt[0], reduction="none")
        return float(nll[torch.tensor(s.mask)].mean())

    assert abs(loss("red") - loss("blue")) > 1e-5


@pytest.mark.parametrize("renderer", ["default", "auto", "qwen3"])
def test_every_renderer_gives_the_same_image_sample(vl_model, rows, renderer):
    cfg = get_registry().get("renderers", renderer).Config()
    rr = VisionRowRenderer(SFTDataConfig(name="unused"), cfg, str(vl_model), VLMConfig())
    row = _row(_url(_shape("red")))
    got, want = rr.sample(row, 0, 512), rows.sample(row, 0, 512)
    assert (got.inputs, got.targets, got.mask) == (want.inputs, want.targets, want.mask)
    assert sum(t == rr.image_token_id for t in got.inputs) == 16
