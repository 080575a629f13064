"""coloured-shapes: deterministic images, answers checked against the pixels, scoring, settings."""

from __future__ import annotations

import asyncio
import base64
import io

import pytest
from PIL import Image
from prl_tasks_builtin import ColouredShapes
from prl_tasks_builtin.coloured_shapes import COLOURS, parse_reply
from pydantic import ValidationError

from prl.images import split_image_refs
from prl.tasks.testing import END, ByteRenderer, ScriptedClient
from prl.types import Sampling


def _tasks(split="train", **cfg):
    return list(ColouredShapes(ColouredShapes.Config(**cfg)).tasks(split))


def _image(task) -> Image.Image:
    (user,) = [m for m in task.prompt if m["role"] == "user"]
    image_part, text_part = user["content"]
    assert image_part["type"] == "image_url" and text_part == {"type": "text", "text": task.data["question"]}
    head, _, payload = image_part["image_url"]["url"].partition(",")
    assert head == "data:image/png;base64"
    img = Image.open(io.BytesIO(base64.b64decode(payload, validate=True)))
    assert img.format == "PNG"
    return img.convert("RGB")


def _blobs(img: Image.Image) -> list[tuple[str, str]]:
    """(colour, shape) of every 4-connected region of one palette colour, read from the pixels
    alone: the shape is told by how much of its bounding box it fills."""
    w, h = img.size
    px = img.load()
    names = {rgb: name for name, rgb in COLOURS.items()}
    seen: set[tuple[int, int]] = set()
    out = []
    for y in range(h):
        for x in range(w):
            if (x, y) in seen or px[x, y] not in names:
                continue
            colour, stack, region = px[x, y], [(x, y)], []
            seen.add((x, y))
            while stack:
                cx, cy = stack.pop()
                region.append((cx, cy))
                for nx, ny in ((cx + 1, cy), (cx - 1, cy), (cx, cy + 1), (cx, cy - 1)):
                    if 0 <= nx < w and 0 <= ny < h and (nx, ny) not in seen and px[nx, ny] == colour:
                        seen.add((nx, ny))
                        stack.append((nx, ny))
            xs, ys = [p[0] for p in region], [p[1] for p in region]
            fill = len(region) / ((max(xs) - min(xs) + 1) * (max(ys) - min(ys) + 1))
            shape = "square" if fill > 0.93 else "circle" if fill > 0.68 else "triangle"
            out.append((names[colour], shape))
    return out


def test_examples_are_deterministic_and_seeded():
    first = _tasks(num_train=20, question="mixed")
    again = _tasks(num_train=20, question="mixed")
    assert [t.prompt for t in first] == [t.prompt for t in again]
    assert [t.task_id for t in first] == [f"train/{i}" for i in range(20)]
    # an example depends on its index, not on how many were generated before it
    assert [t.prompt for t in _tasks(num_train=5, question="mixed")] == [t.prompt for t in first[:5]]
    other_seed = _tasks(num_train=20, question="mixed", seed=1)
    evals = _tasks("eval", num_eval=20, question="mixed")
    assert [t.prompt for t in other_seed] != [t.prompt for t in first] != [t.prompt for t in evals]
    assert [t.prompt for t in _tasks("test", num_eval=20, question="mixed")] == [t.prompt for t in evals]
    assert {t.data["kind"] for t in first} == {"count", "colour"}
    with pytest.raises(ValueError, match="splits"):
        _tasks("validation")


@pytest.mark.parametrize("size", [32, 64, 100])
def test_images_decode_to_the_stated_size(size):
    for task in _tasks(num_train=5, image_size=size):
        assert _image(task).size == (size, size)


@pytest.mark.parametrize("question", ["count", "colour"])
def test_answers_match_the_drawn_pixels(question):
    for task in _tasks(num_train=40, question=question, min_shapes=1, max_shapes=9):
        blobs = _blobs(_image(task))
        assert sorted(blobs) == sorted((s["colour"], s["shape"]) for s in task.data["shapes"])
        if question == "count":
            colour = task.data["question"].split()[2]
            assert task.data["answer"] == str(sum(c == colour for c, _ in blobs))
        else:
            shape = task.data["question"].removesuffix("?").split()[-1]
            (only,) = [c for c, s in blobs if s == shape]  # the asked-about shape is drawn once
            assert task.data["answer"] == only


@pytest.mark.parametrize(
    ("kind", "reply", "parsed"),
    [
        ("count", "2", "2"),
        ("count", "There are 2 red shapes.", "2"),
        ("count", "<think>maybe 3</think> <answer>2</answer>", "2"),
        ("count", "I see three", None),
        ("count", "<think>2", None),  # cut off while reasoning: no answer
        ("colour", "Red.", "red"),
        ("colour", "The circle is blue", "blue"),
        ("colour", "<answer>green</answer>", "green"),
        ("colour", "redish?", None),
        ("colour", "", None),
    ],
)
def test_parse_reply(kind, reply, parsed):
    assert parse_reply(reply, kind) == parsed


@pytest.mark.parametrize("question", ["count", "colour"])
def test_rollout_scores_right_wrong_and_garbled_replies(question):
    ts = ColouredShapes(ColouredShapes.Config(num_train=3, question=question))
    task = next(iter(ts.tasks("train")))
    right = f"The answer is {task.data['answer']}."
    wrong = "purple" if task.data["answer"] != "purple" else "red"
    wrong = str(int(task.data["answer"]) + 1) if question == "count" else wrong
    renderer = ByteRenderer()
    for reply, reward, answered in [(right, 1.0, 1.0), (wrong, 0.0, 1.0), ("#?!", 0.0, 0.0)]:
        client = ScriptedClient(lambda m, reply=reply: reply)
        trace = asyncio.run(ts.rollout(task, client, renderer, Sampling()))
        assert (trace.reward, trace.metrics) == (reward, {"answered": answered}), reply
        (branch,) = trace.branches
        # the image part is one placeholder in the prompt, and the image goes beside it
        messages, images = split_image_refs(task.prompt)
        prompt = renderer.render_ids(messages, add_generation_prompt=True)
        assert branch.token_ids == prompt + [*reply.encode(), END] and trace.env == "coloured-shapes"
        assert client.images == [images] and images[0].startswith("data:image/png;base64,")


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"image_size": 16}, "image_size\n  Input should be greater than or equal to 32"),
        ({"image_size": 4096}, "image_size\n  Input should be less than or equal to 512"),
        ({"max_shapes": 10}, "max_shapes\n  Input should be less than or equal to 9"),
        ({"min_shapes": 0}, "min_shapes\n  Input should be greater than or equal to 1"),
        ({"min_shapes": 5, "max_shapes": 3}, "min_shapes (5) must not exceed max_shapes (3)"),
        ({"question": "size"}, "question\n  Input should be 'count', 'colour' or 'mixed'"),
        ({"num_train": 0}, "num_train\n  Input should be greater than or equal to 1"),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_field(settings, error):
    with pytest.raises(ValidationError) as info:
        ColouredShapes.Config(**settings)
    assert error in str(info.value)


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--env.taskset.image-size", "16"], "--source[0].env.taskset.image-size: Input should be greater than"),
        (
            ["--env.taskset.min-shapes", "5", "--env.taskset.max-shapes", "3"],
            "--source[0].env.taskset: Value error, min_shapes (5) must not exceed max_shapes (3)",
        ),
    ],
)
def test_bad_settings_on_the_command_line_exit_2_with_one_line(flags, line, tmp_path):
    from typer.testing import CliRunner

    from prl.cli.main import app

    result = CliRunner().invoke(app, ["eval", "coloured-shapes", "-m", "models/none", "-o", str(tmp_path), *flags])
    assert result.exit_code == 2
    assert line in result.output and "Traceback" not in result.output
