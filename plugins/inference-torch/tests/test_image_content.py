"""Image parts in ``/v1/chat/completions``.

A vision-language model (``tiny-qwen3.5-vl``) sees them: the server reads the image, runs
the vision tower in the prefill and decodes with 3-D rotary positions, and its greedy
answer is the one transformers' own ``generate`` gives for the same prompt and pixels; a
different image gives a different answer. A text model refuses an image part in one line
naming it (400), instead of answering as if nothing had been shown; so does the VL model
for an image it cannot read or a path on the server's own disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest
import torch

from prl.testing.images import png_url

pytestmark = pytest.mark.slow

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
QUESTION = {"type": "text", "text": "What colour is the shape?"}
TOKENS = 12


def _image(colour: str) -> dict:
    return {"type": "image_url", "image_url": {"url": png_url(colour)}}


def _chat(server, content, **extra) -> httpx.Response:
    body = {"messages": [{"role": "system", "content": "Answer."}, {"role": "user", "content": content}]}
    return httpx.post(f"{server.base_url}/v1/chat/completions", json={**body, "max_tokens": 2, **extra}, timeout=120)


@pytest.fixture(scope="module")
def vl_model(tmp_path_factory) -> str:
    """The tiny VL preset with its weights spread out, so greedy answers vary with the input
    (the preset's small initialisation answers one token whatever it is shown)."""
    from prl_model_init import make_model
    from transformers import AutoModelForImageTextToText

    src = make_model(tmp_path_factory.mktemp("vl") / "src", preset="tiny-qwen3.5-vl", seed=0)
    model = AutoModelForImageTextToText.from_pretrained(src, dtype=torch.float32)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.add_(torch.randn(p.shape, generator=gen) * 0.5)
    out = tmp_path_factory.mktemp("vl") / "spread"
    model.save_pretrained(out)
    for f in src.iterdir():
        if not (out / f.name).exists():
            shutil.copy(f, out / f.name)
    return str(out)


@pytest.fixture(scope="module")
def vl_server(vl_model, server_process, tmp_path_factory):
    start, stop = server_process
    backend = {"max_batch_size": 8, "max_prefill_tokens": 1024, "dtype": "float32", "num_threads": 1}
    proc, url = start(
        {"model": {"name": vl_model}, "server": {"port": 0}, "backend": backend}, tmp_path_factory.mktemp("s")
    )
    yield url
    stop(proc)


def _reference(model_dir: str, prompt_ids: list[int], colour: str) -> tuple[list[int], list[float]]:
    """transformers' greedy continuation of the served prompt with the same image, and the
    logprob of each of its tokens."""
    from transformers import AutoImageProcessor, AutoModelForImageTextToText

    from prl.images import load_image

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    pixels = AutoImageProcessor.from_pretrained(model_dir)(images=[load_image(png_url(colour))], return_tensors="pt")
    ids = torch.tensor([prompt_ids])
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        pixel_values=pixels["pixel_values"],
        image_grid_thw=pixels["image_grid_thw"],
        mm_token_type_ids=(ids == model.config.image_token_id).int(),
        max_new_tokens=TOKENS,
        do_sample=False,
        output_scores=True,
        return_dict_in_generate=True,
    )
    logprobs = [torch.log_softmax(step[0], -1).max().item() for step in out.scores]
    return out.sequences[0, len(prompt_ids) :].tolist(), logprobs


def test_a_vl_model_answers_what_it_is_shown_as_transformers_does(vl_server, vl_model):
    from types import SimpleNamespace

    server = SimpleNamespace(base_url=vl_server)
    image_token = json.loads((Path(vl_model) / "config.json").read_text())["image_token_id"]
    answers = {}
    for colour in ("red", "blue"):
        res = _chat(
            server, [QUESTION, _image(colour)], max_tokens=TOKENS, temperature=0, ignore_eos=True, logprobs=True
        )
        assert res.status_code == 200, res.text
        body = res.json()
        prompt, answer = body["prompt_token_ids"], body["choices"][0]["token_ids"]
        # the image is in the prompt as its merged patches, not one placeholder token
        assert prompt.count(image_token) == 16, prompt
        tokens, logprobs = _reference(vl_model, prompt, colour)
        assert answer == tokens, colour
        # the decode steps' 3-D rotary positions (after the image) are right: a shift moves
        # these by ~0.04 while the greedy tokens stay the same
        served = [entry["logprob"] for entry in body["choices"][0]["logprobs"]["content"]]
        assert served == pytest.approx(logprobs, abs=2e-3), colour
        answers[colour] = answer
    assert answers["red"] != answers["blue"]


@pytest.mark.parametrize(
    ("part", "said"),
    [
        (IMAGE, "messages[1].content[1]: image data:image/png;base64,iVBORw0KGgo=: cannot be read"),
        ({"type": "image", "image": "/etc/hostname"}, "messages[1].content[1]: the server reads images from data:"),
    ],
)
def test_an_image_the_vl_server_cannot_read_is_a_one_line_400(vl_server, part, said):
    from types import SimpleNamespace

    res = _chat(SimpleNamespace(base_url=vl_server), [QUESTION, part])
    assert res.status_code == 400
    message = res.json()["error"]["message"]
    assert message.startswith(said), message
    assert "\n" not in message


@pytest.mark.parametrize("part", [IMAGE, {"type": "image", "image": "shape.png"}])
def test_a_text_model_refuses_an_image_part_in_one_line(inference_server, part):
    res = _chat(inference_server, [QUESTION, part])
    assert res.status_code == 400
    message = res.json()["error"]["message"]
    assert message.startswith("messages[1].content[1]: ")
    assert "is a text model and cannot see images" in message
    assert "\n" not in message


def test_text_parts_still_work(inference_server):
    res = _chat(inference_server, [{"type": "text", "text": "What colour?"}])
    assert res.status_code == 200, res.text
    assert res.json()["choices"][0]["finish_reason"] in ("length", "stop")


def _generate(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/inference/v1/generate", json=body, timeout=120)


def test_the_token_route_widens_placeholders_and_answers_as_the_chat_route(vl_server):
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    chat = _chat(SimpleNamespace(base_url=vl_server), [QUESTION, _image("green")], max_tokens=6, temperature=0).json()
    widened = chat["prompt_token_ids"]
    tok = AutoTokenizer.from_pretrained(json.loads(httpx.get(f"{vl_server}/v1/models").text)["data"][0]["id"])
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    one = [t for i, t in enumerate(widened) if t != pad or widened[i - 1] != pad]  # one pad per image
    sampling = {"max_tokens": 6, "temperature": 0}
    res = _generate(vl_server, {"token_ids": one, "images": [png_url("green")], "sampling_params": sampling})
    assert res.status_code == 200, res.text
    body = res.json()
    assert body["prompt_token_ids"] == widened
    assert body["choices"][0]["token_ids"] == chat["choices"][0]["token_ids"]
    # sent back already widened (a later turn), it is taken as it is
    again = _generate(vl_server, {"token_ids": widened, "images": [png_url("green")], "sampling_params": sampling})
    assert again.json()["choices"][0]["token_ids"] == chat["choices"][0]["token_ids"]
    # one placeholder, two images
    bad = _generate(vl_server, {"token_ids": one, "images": [png_url("green")] * 2, "sampling_params": sampling})
    assert bad.status_code == 400
    assert bad.json()["error"]["message"].startswith("token_ids: the rendered sample has 1 image placeholders for 2")


def test_a_text_model_refuses_images_on_the_token_route(inference_server):
    res = _generate(inference_server.base_url, {"token_ids": [1, 2, 3], "images": [png_url("red")]})
    assert res.status_code == 400
    assert res.json()["error"]["message"].startswith("images: ")
    assert "is a text model and cannot see images" in res.json()["error"]["message"]


def test_an_update_of_the_language_part_alone_keeps_the_vision_tower(vl_server, vl_model, tmp_path):
    """RL on a text taskset publishes the language part only (no ``model.visual.*``): the
    served model takes it, answers change, and sending the first weights back restores the
    first answers exactly, so the tower was never touched."""
    from safetensors.torch import save_file
    from transformers import AutoModelForImageTextToText

    def ask() -> list[int]:
        res = _chat(SimpleNamespace(base_url=vl_server), [QUESTION, _image("red")], max_tokens=8, temperature=0)
        return res.json()["choices"][0]["token_ids"]

    def publish(tensors: dict, name: str) -> httpx.Response:
        (tmp_path / name).mkdir()
        save_file({k: v.clone() for k, v in tensors.items()}, str(tmp_path / name / "model.safetensors"))
        return httpx.post(f"{vl_server}/update_weights", json={"weight_dir": str(tmp_path / name)}, timeout=120)

    from types import SimpleNamespace

    first = ask()
    state = AutoModelForImageTextToText.from_pretrained(vl_model, dtype=torch.float32).state_dict()
    language = {k: v for k, v in state.items() if ".visual." not in k}
    assert len(language) < len(state) and all(k.startswith(("model.language_model.", "lm_head")) for k in language)
    moved = {k: v * 1.5 if k.endswith("proj.weight") else v for k, v in language.items()}
    res = publish(moved, "moved")
    assert res.status_code == 200, res.text
    assert ask() != first
    assert publish(language, "back").status_code == 200
    assert ask() == first
