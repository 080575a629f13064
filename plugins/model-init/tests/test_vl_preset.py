"""``tiny-qwen3.5-vl``: a Qwen3.5 vision-language model with a real image processor saved
beside the tokenizer; a chat with an image goes through processor and model, and what the
model predicts depends on the image."""

from __future__ import annotations

import json

import pytest
import torch
import typer
from PIL import Image, ImageDraw
from prl_model_init import count_parameters, make_model
from prl_model_init.plugin import prl_add_commands
from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer
from typer.testing import CliRunner

PRESET = "tiny-qwen3.5-vl"


@pytest.fixture(scope="module")
def vl_dir(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("models") / PRESET, preset=PRESET, seed=0)


def _shape(colour: str, kind: str, size: int = 64) -> Image.Image:
    img = Image.new("RGB", (size, size), "white")
    draw = ImageDraw.Draw(img)
    box = (size // 4, size // 4, 3 * size // 4, 3 * size // 4)
    (draw.ellipse if kind == "circle" else draw.rectangle)(box, fill=colour)
    return img


def _chat_inputs(model_dir, image: Image.Image) -> dict:
    """What Qwen3VLProcessor does, from the saved tokenizer and image processor: render the
    chat (one ``<|image_pad|>`` per image), widen the pad to the image's merged patch count,
    and mark image tokens for the model's 3-D positions."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    images = AutoImageProcessor.from_pretrained(model_dir)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What shape is this?"}]}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    pixels = images(images=[image], return_tensors="pt")
    n = int(pixels["image_grid_thw"][0].prod()) // images.merge_size**2
    ids = tok(text.replace(tok.image_token, tok.image_token * n), return_tensors="pt")["input_ids"]
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "mm_token_type_ids": (ids == tok.image_token_id).int(),
        "pixel_values": pixels["pixel_values"],
        "image_grid_thw": pixels["image_grid_thw"],
    }


def test_directory_is_a_qwen3_5_vl_checkpoint(vl_dir):
    model = AutoModelForImageTextToText.from_pretrained(vl_dir)
    assert type(model).__name__ == "Qwen3_5ForConditionalGeneration"
    assert sum(p.numel() for p in model.parameters()) == count_parameters(PRESET)
    cfg = json.loads((vl_dir / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_5" and cfg["prl_renderer"] == "qwen3"
    assert cfg["text_config"]["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert cfg["vision_config"]["out_hidden_size"] == cfg["text_config"]["hidden_size"] == 192
    tok = AutoTokenizer.from_pretrained(vl_dir)
    assert len(tok) == 320 and tok("hé")["input_ids"] == [104, 195, 169]  # still byte-level
    ids = tok.convert_tokens_to_ids(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"])
    assert ids == [cfg["vision_start_token_id"], cfg["vision_end_token_id"], cfg["image_token_id"], 269]
    images = AutoImageProcessor.from_pretrained(vl_dir)
    assert (images.patch_size, images.merge_size, images.temporal_patch_size) == (8, 2, 2)
    proc = json.loads((vl_dir / "processor_config.json").read_text())
    assert proc["processor_class"] == "Qwen3VLProcessor"


def test_image_processor_bounds_the_image_size(vl_dir):
    """A 64x64 image is 8x8 patches (16 image tokens); a 512x512 one is scaled down to the
    128x128 pixel budget, so it never costs more than 64 tokens."""
    images = AutoImageProcessor.from_pretrained(vl_dir)
    small = images(images=[_shape("red", "square")], return_tensors="pt")
    big = images(images=[_shape("red", "square", 512)], return_tensors="pt")
    assert small["image_grid_thw"].tolist() == [[1, 8, 8]]
    assert big["image_grid_thw"].tolist() == [[1, 16, 16]]
    assert small["pixel_values"].shape == (64, 3 * 2 * 8 * 8)


def test_a_chat_with_an_image_generates(vl_dir):
    model = AutoModelForImageTextToText.from_pretrained(vl_dir).eval()
    inputs = _chat_inputs(vl_dir, _shape("red", "circle"))
    assert int(inputs["mm_token_type_ids"].sum()) == 16
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=8, min_new_tokens=8, do_sample=True, top_k=0)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 8
    assert torch.equal(out[0, : inputs["input_ids"].shape[1]], inputs["input_ids"][0])


def test_different_images_give_different_logits(vl_dir):
    model = AutoModelForImageTextToText.from_pretrained(vl_dir).eval()
    with torch.no_grad():
        logits = [
            model(**_chat_inputs(vl_dir, _shape(colour, kind))).logits[0, -1]
            for colour, kind in [("red", "circle"), ("red", "circle"), ("blue", "square")]
        ]
    torch.testing.assert_close(logits[0], logits[1])  # deterministic for one image
    assert (logits[0] - logits[2]).abs().max() > 1e-4


def test_auto_processor_loads_where_torchvision_is_installed(vl_dir):
    pytest.importorskip("torchvision")
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(vl_dir)
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}]
    text = proc.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    out = proc(text=[text], images=[_shape("red", "circle")], return_tensors="pt")
    assert int((out["input_ids"] == proc.image_token_id).sum()) == 16


def test_cli_writes_the_vl_preset(tmp_path):
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """prl"""

    prl_add_commands(app=app)
    res = CliRunner().invoke(app, ["model", "init", "--preset", PRESET, "--out", str(tmp_path / "m")])
    assert res.exit_code == 0, res.output
    assert f"wrote {PRESET} model ({count_parameters(PRESET):,} parameters, seed 0)" in res.output
    assert (tmp_path / "m" / "preprocessor_config.json").is_file()
