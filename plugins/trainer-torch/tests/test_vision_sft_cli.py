"""``prl sft`` with ``[model.vlm]`` from the command line: the trainer plugin runs the vision
loop (one rank here, two FSDP ranks under torchrun with the same losses), ``prl export``
writes the image-text model with its processor, and what the vision loop cannot do yet
(online eval, LoRA) is one line and exit 2 when the config resolves."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
import typer
from PIL import Image
from prl_trainer_torch.cli import add_commands
from typer.testing import CliRunner

from prl.cli.main import app

COLOURS = ("red", "green", "blue")


@pytest.fixture(scope="module")
def vl_model(tmp_path_factory):
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "vl", "tiny-qwen3.5-vl", seed=0)


@pytest.fixture(scope="module")
def colour_data(tmp_path_factory) -> Path:
    rows = []
    for i in range(8):
        img, buf = Image.new("RGB", (64, 64), COLOURS[i % 3]), io.BytesIO()
        img.save(buf, format="PNG")
        url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
        user = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Colour?"}]
        rows.append({"prompt": [{"role": "user", "content": user}], "completion": COLOURS[i % 3]})
    path = tmp_path_factory.mktemp("data") / "colours.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _sft(out: Path, model: Path, data: Path, *flags: str, toml: Path | None = None):
    argv = [
        "sft",
        *(["@", str(toml)] if toml else []),
        "--output-dir",
        str(out),
        "--run.name",
        "vl",
        "--model.name",
        str(model),
        "--model.vlm",
    ]
    argv += ["--data.name", str(data), "--data.seq-len", "96", "--data.batch-size", "4", "--data.shuffle", "false"]
    return CliRunner().invoke(app, [*argv, "--max-steps", "2", "--renderer.name", "auto", *flags])


def _losses(out: Path) -> list[float]:
    lines = (out / "vl" / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x)["loss/mean"] for x in lines if "loss/mean" in json.loads(x)]


def test_one_and_two_ranks_train_alike_and_export_the_vlm(tmp_path, vl_model, colour_data):
    from transformers import AutoImageProcessor, AutoModelForImageTextToText

    one = _sft(tmp_path / "one", vl_model, colour_data, "--ckpt.interval", "2")
    assert one.exit_code == 0, one.output
    two = _sft(tmp_path / "two", vl_model, colour_data, "--num-workers", "2")
    assert two.exit_code == 0, two.output
    a, b = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert len(a) == len(b) == 2 and a[1] < a[0]
    for x, y in zip(a, b, strict=True):
        assert abs(x - y) < 1e-4 * abs(x), (a, b)  # FSDP2 over gloo: the same global batch per step
    commands = typer.Typer()
    add_commands(commands)  # prl export, as the CLI registers it from the trainer plugin
    step = tmp_path / "one" / "vl" / "checkpoints" / "step_2"
    res = CliRunner().invoke(commands, ["export", str(step), str(tmp_path / "hf")])
    assert res.exit_code == 0, res.output
    model = AutoModelForImageTextToText.from_pretrained(tmp_path / "hf")
    assert type(model).__name__ == "Qwen3_5ForConditionalGeneration"
    assert AutoImageProcessor.from_pretrained(tmp_path / "hf").merge_size == 2


EVAL = """
[eval]
interval = 1

[[eval.source]]
name = "cs"

[eval.source.env.taskset]
id = "coloured-shapes"
"""


@pytest.mark.parametrize(
    ("extra", "what"), [(EVAL, "online eval ([eval])"), ("[model.lora]\nrank = 4\n", "LoRA ([model.lora])")]
)
def test_what_the_vision_loop_cannot_do_yet_is_one_line(tmp_path, vl_model, colour_data, extra, what):
    (tmp_path / "extra.toml").write_text(extra)
    res = _sft(tmp_path, vl_model, colour_data, "--dry-run", toml=tmp_path / "extra.toml")
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert f"model.vlm: {what} of a vision-language run is not supported yet" in res.output


def test_a_resumed_run_continues_exactly(tmp_path, vl_model, colour_data):
    """Stopped at step 2 and resumed to 4, the run trains steps 3-4 as an unbroken run does:
    the weights, optimizer, scheduler and the data position come back."""
    data = ("--data.shuffle", "true", "--data.batch-size", "2")  # 4 steps an epoch: step 2 is mid-epoch
    whole = _sft(tmp_path / "whole", vl_model, colour_data, "--max-steps", "4", *data)
    assert whole.exit_code == 0, whole.output
    part = tmp_path / "part"
    first = _sft(part, vl_model, colour_data, "--ckpt.interval", "2", *data)
    assert first.exit_code == 0, first.output
    again = _sft(part, vl_model, colour_data, "--max-steps", "4", "--resume", *data)
    assert again.exit_code == 0, again.output
    a, b = _losses(tmp_path / "whole"), _losses(part)
    assert len(a) == 4 and len(b) == 4
    for x, y in zip(a, b, strict=True):
        assert abs(x - y) < 1e-5 * abs(x), (a, b)
