"""A taskset that puts images in its prompts (coloured-shapes) in ``prl rl`` and ``prl eval``:
refused in one line naming the source on a text model (the server would refuse every
rollout's images), accepted on a vision-language model (``[model.vlm]`` in ``prl rl``)."""

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
    # truncated sampling is replayed by the vision-language policy too
    truncated = _rl(
        tmp_path / "p", models["tiny-qwen3.5-vl"], "--orchestrator.train.source", SHAPES, "--model.vlm", "true",
        "--orchestrator.train.sampling.top-p", "0.9", "--orchestrator.train.sampling.top-k", "20",
    )  # fmt: skip
    assert truncated.exit_code == 0, truncated.output
    # a text taskset on a text model is not concerned
    res = _rl(tmp_path / "text", models["tiny"])
    assert res.exit_code == 0, res.output


def test_eval_of_an_image_taskset_on_a_text_model_is_refused_in_one_line(tmp_path, models):
    argv = ["eval", "coloured-shapes", "--output-dir", str(tmp_path), "--dry-run"]
    res = CliRunner().invoke(app, [*argv, "--model.name", str(models["tiny"])])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (
        "Config file error: --source[0].env.taskset: coloured-shapes sends images in its prompts and "
        f"{models['tiny']} is a text model (its config has no vision_config): evaluate a vision-language model"
    )
    res = CliRunner().invoke(app, [*argv, "--model.name", str(models["tiny-qwen3.5-vl"])])
    assert res.exit_code == 0, res.output
