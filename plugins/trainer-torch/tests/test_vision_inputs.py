"""Images in chat rows (prl_trainer_torch.vision_inputs): read from data: URLs and paths,
bad ones refused in one line, placeholders widened to the image's token count with the loss
mask carried along, and a few optimizer steps on tiny-qwen3.5-vl that learn from the
image-bearing sample while the vision tower stays frozen (or trains when told to)."""

from __future__ import annotations

import base64
import io

import pytest
import torch
from PIL import Image, ImageDraw
from prl_trainer_torch.vision_inputs import (
    PLACEHOLDER,
    ImageError,
    expand_image_tokens,
    freeze_vision_tower,
    load_image,
    process_images,
    split_images,
    vision_tower,
)

from prl.config.policy import VLMConfig


def _shape(colour: str, kind: str, size: int = 64) -> Image.Image:
    img = Image.new("RGB", (size, size), "white")
    box = (size // 4, size // 4, 3 * size // 4, 3 * size // 4)
    (ImageDraw.Draw(img).ellipse if kind == "circle" else ImageDraw.Draw(img).rectangle)(box, fill=colour)
    return img


def _data_url(img: Image.Image) -> str:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@pytest.fixture(scope="module")
def vl_model(tmp_path_factory):
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "vl", "tiny-qwen3.5-vl", seed=0)


def test_images_load_from_data_urls_and_paths(tmp_path):
    img = _shape("red", "circle")
    img.save(tmp_path / "a.png")
    for ref, base in ((_data_url(img), None), (str(tmp_path / "a.png"), None), ("a.png", tmp_path)):
        got = load_image(ref, base)
        assert got.size == (64, 64) and got.tobytes() == img.tobytes()
    assert load_image(f"file://{tmp_path / 'a.png'}").tobytes() == img.tobytes()


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("data:image/png;base64,!!!notbase64", "cannot be read"),
        ("data:image/png;base64," + base64.b64encode(b"not a png").decode(), "cannot be read"),
        ("data:image/png,rawbytes", "only base64 data: URLs"),
        ("/nonexistent/x.png", "cannot be read"),
        (42, "expected a data: URL or a file path"),
    ],
)
def test_a_bad_image_is_one_line_naming_it(ref, why):
    with pytest.raises(ImageError) as exc:
        load_image(ref)
    assert why in str(exc.value) and "\n" not in str(exc.value)
    assert str(exc.value).startswith("image ")


def test_image_parts_become_placeholders_in_order(tmp_path):
    red, blue = _shape("red", "circle"), _shape("blue", "square")
    blue.save(tmp_path / "b.png")
    messages = [
        {"role": "system", "content": "Count shapes."},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": _data_url(red)}},
                {"type": "text", "text": " and "},
                {"type": "image", "image": "b.png"},
            ],
        },
        {"role": "assistant", "content": "two"},
    ]
    out, images = split_images(messages, tmp_path)
    assert out[0] == messages[0] and out[2] == messages[2]
    assert out[1] == {"role": "user", "content": f"{PLACEHOLDER} and {PLACEHOLDER}"}
    assert [i.tobytes() for i in images] == [red.tobytes(), blue.tobytes()]
    with pytest.raises(ImageError, match="expected type text, image_url, input_image or image"):
        split_images([{"role": "user", "content": [{"type": "audio"}]}])


def test_expansion_widens_each_pad_and_masks_it():
    ids, mask = [1, 9, 2, 9, 3], [False, False, True, False, True]
    assert expand_image_tokens(ids, mask, [2, 3], 9) == (
        [1, 9, 9, 2, 9, 9, 9, 3],
        [False, False, False, True, False, False, False, True],
    )
    with pytest.raises(ValueError, match="2 image placeholders for 1 images"):
        expand_image_tokens(ids, mask, [4], 9)


def test_pixel_bounds_of_the_section_reach_the_processor(vl_model):
    from transformers import AutoImageProcessor

    proc = AutoImageProcessor.from_pretrained(vl_model)
    big = [_shape("red", "circle", 512)]
    assert process_images(big, proc).image_grid_thw.tolist() == [[1, 16, 16]]
    capped = process_images(big, proc, VLMConfig(max_pixels=64 * 64))
    assert capped.image_grid_thw.tolist() == [[1, 8, 8]] and capped.tokens_per_image(2) == [16]


def _sample(vl_model, image: Image.Image) -> dict:
    """One SFT sample: the chat rendered by the model's template, the loss on the answer."""
    from transformers import AutoImageProcessor, AutoTokenizer

    tok, proc = AutoTokenizer.from_pretrained(vl_model), AutoImageProcessor.from_pretrained(vl_model)
    chat = [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": _data_url(image)}}]},
        {"role": "assistant", "content": "a red circle"},
    ]
    messages, images = split_images(chat)
    prompt = tok.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(messages, tokenize=False)
    ids = tok(full)["input_ids"]
    n_prompt = len(tok(prompt)["input_ids"])
    mask = [i >= n_prompt for i in range(len(ids))]
    pix = process_images(images, proc)
    ids, mask = expand_image_tokens(ids, mask, pix.tokens_per_image(proc.merge_size), tok.image_token_id)
    t = torch.tensor([ids])
    labels = torch.where(torch.tensor([mask]), t, torch.full_like(t, -100))
    return {
        "input_ids": t,
        "attention_mask": torch.ones_like(t),
        "mm_token_type_ids": (t == tok.image_token_id).int(),
        "pixel_values": pix.pixel_values,
        "image_grid_thw": pix.image_grid_thw,
        "labels": labels,
    }


def _train(vl_model, freeze: bool, steps: int = 5):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(vl_model)
    frozen = freeze_vision_tower(model, freeze)
    tower = {k: v.detach().clone() for k, v in vision_tower(model).state_dict().items()}
    text = model.get_input_embeddings().weight.detach().clone()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    batch = _sample(vl_model, _shape("red", "circle"))
    losses = []
    for _ in range(steps):
        loss = model(**batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    moved = {k: not torch.equal(v, vision_tower(model).state_dict()[k]) for k, v in tower.items()}
    return frozen, losses, moved, not torch.equal(text, model.get_input_embeddings().weight)


def test_the_image_reaches_the_loss(vl_model):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(vl_model).eval()
    red, blue = _sample(vl_model, _shape("red", "circle")), _sample(vl_model, _shape("blue", "square"))
    assert int(red["mm_token_type_ids"].sum()) == 16
    assert not (red["labels"][red["mm_token_type_ids"].bool()] != -100).any()  # image tokens untrained
    with torch.no_grad():
        assert abs(model(**red).loss.item() - model(**blue).loss.item()) > 1e-5


def test_a_frozen_tower_stays_put_while_the_language_model_learns(vl_model):
    frozen, losses, moved, text_moved = _train(vl_model, freeze=True)
    assert frozen == sum(p.numel() for p in vision_tower_params(vl_model))
    assert losses[-1] < losses[0] - 0.5, losses
    assert text_moved and not any(moved.values())


def test_an_unfrozen_tower_trains(vl_model):
    frozen, losses, moved, _ = _train(vl_model, freeze=False)
    assert frozen == 0 and losses[-1] < losses[0]
    assert moved["patch_embed.proj.weight"] and moved["blocks.0.attn.qkv.weight"]


def vision_tower_params(vl_model):
    from transformers import AutoModelForImageTextToText

    return list(vision_tower(AutoModelForImageTextToText.from_pretrained(vl_model)).parameters())
