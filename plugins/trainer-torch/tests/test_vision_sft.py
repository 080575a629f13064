"""``prl sft`` with ``[model.vlm]`` (prl_trainer_torch.vision_sft): rows with images train the
tiny Qwen3.5 VLM with its pixels, a row with a broken image is skipped and counted, the
vision tower stays frozen by default, and the checkpoint exports as the image-text model."""

from __future__ import annotations

import base64
import io
import json
import logging
import random

import pytest
import torch
from PIL import Image, ImageDraw
from prl_trainer_torch.export import export_checkpoint
from prl_trainer_torch.vision_sft import VisionSFTRun

from prl.config.policy import VLMConfig

COLOURS = ("red", "green", "blue")


@pytest.fixture(scope="module")
def vl_model(tmp_path_factory):
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "vl", "tiny-qwen3.5-vl", seed=0)


def _image_rows(folder, n: int) -> list[dict]:
    """Rows asking for a circle's colour, the image a file beside the dataset (relative path)."""
    rows = []
    for i in range(n):
        colour = COLOURS[i % len(COLOURS)]
        img = Image.new("RGB", (64, 64), "white")
        ImageDraw.Draw(img).ellipse((16, 16, 48, 48), fill=colour)
        img.save(folder / f"img{i}.png")
        user = [{"type": "image", "image": f"img{i}.png"}, {"type": "text", "text": "Colour?"}]
        rows.append({"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": colour}]})
    return rows


@pytest.fixture
def image_data(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    rows = _image_rows(folder, 6)
    broken = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,bm90IGFuIGltYWdl"}}]
    rows.insert(2, {"messages": [{"role": "user", "content": broken}, {"role": "assistant", "content": "red"}]})
    path = folder / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _config(sft_config, tmp_path, model, data, **over):
    data_cfg = {"seq_len": 96, "batch_size": 2, "micro_batch_size": 1, "shuffle": False}
    cfg = sft_config(tmp_path, model, data, data=data_cfg, **over)
    cfg.model.vlm = VLMConfig()
    return cfg


def test_image_rows_train_the_vlm_and_export_with_its_tower(tmp_path, vl_model, image_data, sft_config, caplog):
    from transformers import AutoModelForImageTextToText

    cfg = _config(sft_config, tmp_path, vl_model, image_data, max_steps=3, ckpt={})
    run = VisionSFTRun(cfg)
    grids = []
    tower = run.hf.model.visual
    tower.register_forward_hook(
        lambda mod, args, kwargs, out: grids.append(kwargs["grid_thw"].tolist()), with_kwargs=True
    )
    try:
        with caplog.at_level(logging.WARNING, logger="prl.trainer"):
            run.train()
        trained = {k: v.detach().clone() for k, v in run.hf.state_dict().items()}
    finally:
        run.close()
    # every micro-batch row carried its image: 3 steps x 2 rows, one 8x8 patch grid each
    assert grids == [[[1, 8, 8]]] * 6
    assert "skipped 1 row(s) for their images (1 unreadable" in caplog.text
    out = export_checkpoint(tmp_path / "outputs" / "t" / "checkpoints" / "step_3", tmp_path / "hf", dtype="float32")
    loaded = AutoModelForImageTextToText.from_pretrained(out)
    assert type(loaded).__name__ == "Qwen3_5ForConditionalGeneration"
    base = AutoModelForImageTextToText.from_pretrained(vl_model).state_dict()
    for name, value in loaded.state_dict().items():
        torch.testing.assert_close(value, trained[name], msg=name)
        if ".visual." in f".{name}":
            torch.testing.assert_close(value, base[name], msg=f"{name} trained while frozen")
    head = "lm_head.weight" if "lm_head.weight" in base else "model.language_model.embed_tokens.weight"
    assert not torch.equal(base[head], trained[head])


def test_the_tower_trains_when_not_frozen(tmp_path, vl_model, image_data, sft_config):
    cfg = _config(sft_config, tmp_path, vl_model, image_data, max_steps=1)
    cfg.model.vlm.freeze_vision_encoder = False
    run = VisionSFTRun(cfg)
    before = {k: v.detach().clone() for k, v in run.hf.model.visual.state_dict().items()}
    try:
        run.train()
        after = run.hf.model.visual.state_dict()
    finally:
        run.close()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def _filled(colour: str) -> str:
    img = Image.new("RGB", (64, 64), colour)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _colour_row(image: str, answer: str) -> dict:
    user = [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": "Colour?"}]
    return {"prompt": [{"role": "user", "content": user}], "completion": answer}


def _first_answer_token_right(run, image: str, answer: str) -> bool:
    """Whether the trained model's most likely first answer token is the answer's."""
    s = run.loader.source.renderer.sample(_colour_row(image, answer), 0, 96)
    first = s.mask.index(True)
    while s.targets[first] != ord(answer[0]):  # skip the assistant header (byte-level tokens)
        first += 1
    ids = torch.tensor([s.inputs[: first + 1]])
    with torch.no_grad():
        hidden = run.hf.model(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            mm_token_type_ids=(ids == run.hf.config.image_token_id).int(),
            pixel_values=s.pixels.pixel_values,
            image_grid_thw=s.pixels.image_grid_thw,
        ).last_hidden_state
    logits = run.hf.get_output_embeddings()(hidden[0, -1])
    return int(logits.argmax()) == s.targets[first]


def test_the_model_learns_what_only_the_image_shows(tmp_path, vl_model, sft_config):
    """Each image is one flat colour and the question never names it: after SFT the model
    answers with the shown colour, and with another row's image its answer follows that
    image, so the answer comes from the pixels and not from the text."""
    rng = random.Random(0)
    rows = [_colour_row(_filled(c), c) for c in (rng.choice(COLOURS) for _ in range(400))]
    data = tmp_path / "colours.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = _config(sft_config, tmp_path, vl_model, data, max_steps=40)
    cfg.data.batch_size = 4
    run = VisionSFTRun(cfg)
    try:
        run.train()
        run.policy.eval()
        shown = [_first_answer_token_right(run, _filled(c), c) for c in COLOURS]
        # the answer the text alone would suggest is wrong whenever the image shows another colour
        other = [_first_answer_token_right(run, _filled(c), COLOURS[(i + 1) % 3]) for i, c in enumerate(COLOURS)]
    finally:
        run.close()
    assert all(shown) and not any(other)
