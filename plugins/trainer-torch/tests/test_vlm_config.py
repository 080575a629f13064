"""``[model.vlm]``: a section (freeze the vision tower, pixel bounds) with ``model.vlm = true``
as shorthand for its defaults, checked at resolve time against the model's config.json:
one line, exit 2, for a model that is not a registered vision-language class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prl.cli.main import app

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    from prl_model_init import make_model

    where = tmp_path_factory.mktemp("models")
    return {p: make_model(where / p, p, seed=0) for p in ("tiny", "tiny-qwen3.5-vl")}


def _sft(tmp_path: Path, model: Path, *flags: str):
    argv = ["sft", "--data.type", "fake", "--output-dir", str(tmp_path), "--dry-run", "--model.name", str(model)]
    return CliRunner().invoke(app, [*argv, *flags])


def _resolved_vlm(run_root: Path, component: str) -> dict | None:
    (cfg,) = run_root.glob(f"*/configs/attempt_1/resolved/{component}.json")
    return json.loads(cfg.read_text())["model"]["vlm"]


def _one_error_line(res) -> str:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    (line,) = [x for x in res.output.strip().splitlines() if "vlm" in x]
    return line


def test_vlm_on_a_text_model_is_one_line(tmp_path, models):
    line = _one_error_line(_sft(tmp_path, models["tiny"], "--model.vlm", "true"))
    assert f"--model.vlm: {models['tiny']} is not a vision-language model prl can train" in line
    assert "model_type 'qwen3'" in line and "qwen3_5, qwen3_5_moe, qwen3_vl" in line
    line = _one_error_line(_sft(tmp_path, models["tiny"], "--model.vlm.max-pixels", "4096"))
    assert "is not a vision-language model" in line


def test_a_pixel_bound_below_one_image_token_is_one_line(tmp_path, models):
    vl = models["tiny-qwen3.5-vl"]
    line = _one_error_line(_sft(tmp_path, vl, "--model.vlm.max-pixels", "100"))
    assert f"--model.vlm.max_pixels: 100 is less than one image token of {vl} (16x16 = 256 pixels)" in line
    line = _one_error_line(_sft(tmp_path, vl, "--model.vlm.min-pixels", "9000", "--model.vlm.max-pixels", "4096"))
    assert "min_pixels (9000) must not exceed max_pixels (4096)" in line


def test_the_section_and_its_shorthand_resolve(tmp_path, models):
    vl = models["tiny-qwen3.5-vl"]
    defaults = {"freeze_vision_encoder": True, "max_pixels": None, "min_pixels": None}
    for i, (flags, want) in enumerate(
        [
            (["--model.vlm", "true"], defaults),
            (["--model.vlm"], defaults),
            (["--model.vlm.freeze-vision-encoder", "false", "--model.vlm.max-pixels", "4096"], None),
            (["--model.vlm", "false"], None),
            ([], None),  # a VLM trained without [model.vlm]: text only, no error
        ]
    ):
        res = _sft(tmp_path / str(i), vl, *flags)
        assert res.exit_code == 0, (flags, res.output)
        got = _resolved_vlm(tmp_path / str(i), "sft")
        if i == 2:
            assert got == {"freeze_vision_encoder": False, "max_pixels": 4096, "min_pixels": None}
        else:
            assert got == want, flags


def _rl_toml(tmp_path: Path, model: Path, vlm_block: str) -> Path:
    text = (ROOT / "examples" / "reverse-text" / "rl.toml").read_text()
    text = text.replace('name = "models/tiny-sft"', f'name = "{model}"\n{vlm_block}')
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "rl.toml"
    path.write_text(text)
    return path


def test_rl_shares_the_section_with_trainer_and_orchestrator(tmp_path, models):
    vl = models["tiny-qwen3.5-vl"]
    for name, block, want in [
        ("bool", "vlm = true", {"freeze_vision_encoder": True, "max_pixels": None, "min_pixels": None}),
        (
            "section",
            "\n[model.vlm]\nfreeze_vision_encoder = false\nmax_pixels = 4096",
            {"freeze_vision_encoder": False, "max_pixels": 4096, "min_pixels": None},
        ),
    ]:
        cfg = _rl_toml(tmp_path / name, vl, block)
        res = CliRunner().invoke(app, ["rl", "@", str(cfg), "--output-dir", str(tmp_path / name / "o"), "--dry-run"])
        assert res.exit_code == 0, res.output
        for component in ("trainer", "orchestrator"):
            assert _resolved_vlm(tmp_path / name / "o", component) == want, (name, component)


def test_rl_with_vlm_on_a_text_model_is_one_line(tmp_path, models):
    cfg = _rl_toml(tmp_path, models["tiny"], "\n[model.vlm]")
    res = CliRunner().invoke(app, ["rl", "@", str(cfg), "--output-dir", str(tmp_path / "o"), "--dry-run"])
    line = _one_error_line(res)
    assert f"--trainer.model.vlm: {models['tiny']} is not a vision-language model prl can train" in line


def test_rl_with_vlm_and_lora_resolves_for_trainer_and_orchestrator(tmp_path, models):
    """[model.lora] with [model.vlm] in RL: an adapter on the language model (the trainer's
    vision_rl), so both sections reach the trainer and the orchestrator asks for the adapter."""
    cfg = _rl_toml(tmp_path, models["tiny-qwen3.5-vl"], "\n[model.vlm]\n\n[model.lora]\nrank = 4")
    res = CliRunner().invoke(app, ["rl", "@", str(cfg), "--output-dir", str(tmp_path / "o"), "--dry-run"])
    assert res.exit_code == 0, res.output
    (trainer,) = (tmp_path / "o").glob("*/configs/attempt_1/resolved/trainer.json")
    model = json.loads(trainer.read_text())["model"]
    assert model["lora"]["rank"] == 4 and model["vlm"]["freeze_vision_encoder"] is True
