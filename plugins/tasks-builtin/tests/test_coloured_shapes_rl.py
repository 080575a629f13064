"""``prl rl`` with a taskset that puts images in its prompts (coloured-shapes) trains only a
model declared to see them: without ``[model.vlm]`` the images would be left out of every
prompt without a word, so the config is refused in one line naming the source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prl.cli.main import app

ROOT = Path(__file__).resolve().parents[3]
SHAPES = json.dumps([{"name": "cs", "env": {"taskset": {"id": "coloured-shapes"}}}])


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    from prl_model_init import make_model

    base = tmp_path_factory.mktemp("models")
    return {p: make_model(base / p, p, seed=0) for p in ("tiny", "tiny-qwen3.5-vl")}


def _rl(tmp_path: Path, model: Path, *extra: str):
    argv = ["rl", "@", str(ROOT / "examples" / "reverse-text" / "rl.toml"), "--output-dir", str(tmp_path)]
    return CliRunner().invoke(app, [*argv, "--dry-run", "--model.name", str(model), *extra])


def test_an_image_taskset_on_a_text_model_is_refused_in_one_line(tmp_path, models):
    res = _rl(tmp_path, models["tiny"], "--orchestrator.train.source", SHAPES)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (
        "Config file error: --orchestrator.train.source[0].env.taskset: coloured-shapes sends images in its "
        f"prompts and {models['tiny']} is trained as a text model: set [model.vlm] for a vision-language model"
    )


def test_an_image_taskset_on_a_vision_language_model_resolves(tmp_path, models):
    res = _rl(tmp_path, models["tiny-qwen3.5-vl"], "--orchestrator.train.source", SHAPES, "--model.vlm", "true")
    assert res.exit_code == 0, res.output
    # a text taskset on a text model is not concerned
    res = _rl(tmp_path / "text", models["tiny"])
    assert res.exit_code == 0, res.output


def test_a_source_that_sends_images_says_the_model_will_not_see_them(caplog):
    from prl.config.components import SourceConfig
    from prl.envs.source import EnvSource

    shapes = SourceConfig.model_validate({"name": "cs", "env": {"taskset": {"id": "coloured-shapes"}}})
    with caplog.at_level("WARNING", logger="prl.envs.source"):
        EnvSource(shapes, "eval", None)
    (record,) = [r for r in caplog.records if r.name == "prl.envs.source"]
    assert record.getMessage() == (
        "source cs: coloured-shapes puts images in its prompts, and no renderer passes pixels to the model yet: "
        "the model sees the text alone (docs/vlm.md)"
    )
    caplog.clear()
    text = SourceConfig.model_validate({"name": "rt", "env": {"taskset": {"id": "reverse-text"}}})
    with caplog.at_level("WARNING", logger="prl.envs.source"):
        EnvSource(text, "eval", None)
    assert not [r for r in caplog.records if r.name == "prl.envs.source"]
