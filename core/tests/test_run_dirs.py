"""--dry-run writes the run directory as ``docs/runs.md`` describes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prl import layout
from prl.cli.main import app

# Dry runs check that the configured model exists; these tests' models are in a test cache.
pytestmark = pytest.mark.usefixtures("hf_cache")

SRC = '[{"name": "alpha", "env": {"taskset": {"id": "fake-tasks"}}}]'


def dry(tmp_path, *extra):
    argv = ["rl", "--output-dir", str(tmp_path), "--orchestrator.train.source", SRC, "--dry-run", *extra]
    return CliRunner().invoke(app, argv)


def test_dry_run_layout(fake_plugins, tmp_path):
    cfg = tmp_path / "rl.toml"
    cfg.write_text('max_steps = 3\n[model]\nname = "org/Tiny-Model"\n')
    result = CliRunner().invoke(
        app, ["rl", "@", str(cfg), "--output-dir", str(tmp_path), "--orchestrator.train.source", SRC, "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    assert "Dry run complete" in result.output
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert run.name.startswith("alpha--tiny-model--") and len(run.name.split("--")[-1]) == 8
    attempt = run / "configs" / "attempt_1"
    assert os.readlink(run / "configs" / "latest") == "attempt_1"
    assert os.readlink(run / "logs" / "latest") == "attempt_1"
    assert (attempt / "command.txt").read_text().startswith("prl rl @ ")
    assert f"# @ {cfg}" in (attempt / "rl.toml").read_text()
    for name in ("trainer", "orchestrator", "inference"):
        data = json.loads((attempt / "resolved" / f"{name}.json").read_text())
        assert data["run"]["name"] == run.name
    assert json.loads((attempt / "resolved" / "trainer.json").read_text())["max_steps"] == 3
    assert json.loads((attempt / "resolved" / "envs" / "train" / "alpha.json").read_text())["name"] == "alpha"
    # nulls are kept in resolved JSON
    assert json.loads((attempt / "resolved" / "trainer.json").read_text())["ckpt"] is None


def test_attempts_increment_and_reuse_is_refused(fake_plugins, tmp_path):
    assert dry(tmp_path, "--run.name", "r1").exit_code == 0
    assert dry(tmp_path, "--run.name", "r1").exit_code == 0  # configs alone are not artifacts
    run = tmp_path / "r1"
    assert os.readlink(run / "configs" / "latest") == "attempt_2"
    (run / "checkpoints").mkdir()
    result = dry(tmp_path, "--run.name", "r1")
    assert result.exit_code == 2
    assert "already holds artifacts" in result.output and "--resume" in result.output and "--clean" in result.output


def test_clean_deletes_run_dir(fake_plugins, tmp_path):
    dry(tmp_path, "--run.name", "r2")
    (tmp_path / "r2" / "checkpoints").mkdir()
    (tmp_path / "r2" / "checkpoints" / "junk").write_text("x")
    result = dry(tmp_path, "--run.name", "r2", "--clean")
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "r2" / "checkpoints").exists()
    assert os.readlink(tmp_path / "r2" / "configs" / "latest") == "attempt_1"


def test_never_clean_env(fake_plugins, tmp_path, monkeypatch):
    dry(tmp_path, "--run.name", "r3")
    (tmp_path / "r3" / "checkpoints").mkdir()
    monkeypatch.setenv("NEVER_CLEAN", "1")
    result = dry(tmp_path, "--run.name", "r3", "--clean")
    assert result.exit_code == 2 and (tmp_path / "r3" / "checkpoints").exists()


def test_run_name_escaping_output_dir_is_rejected(fake_plugins, tmp_path):
    result = dry(tmp_path, "--run.name", "../outside")
    assert result.exit_code == 2
    assert "--run.name" in result.output and "inside output_dir" in result.output
    result = dry(tmp_path, "--run.dir", "/etc")
    assert result.exit_code == 2 and "--run.dir" in result.output


def _complete_step(run: Path, n: int) -> None:
    """An RL checkpoint step both trainer and orchestrator marked complete."""
    for part in layout.COMPONENTS["rl"]:
        layout.mark_complete(layout.step_dir(run / "checkpoints", n), part)


def test_resume_requires_a_complete_checkpoint(fake_plugins, tmp_path):
    dry(tmp_path, "--run.name", "r4")
    result = dry(tmp_path, "--run.name", "r4", "--resume")
    assert result.exit_code == 2 and "no complete checkpoint" in result.output
    _complete_step(tmp_path / "r4", 2)
    assert dry(tmp_path, "--run.name", "r4", "--resume").exit_code == 0
    result = dry(tmp_path, "--run.name", "r4", "--resume.step", "3")
    assert result.exit_code == 2 and "--resume.step" in result.output


def test_clean_with_resume_removes_only_later_steps(fake_plugins, tmp_path):
    dry(tmp_path, "--run.name", "r5")
    for n in (1, 2, 3):
        _complete_step(tmp_path / "r5", n)
    result = dry(tmp_path, "--run.name", "r5", "--resume.step", "2", "--clean")
    assert result.exit_code == 0, result.output
    left = sorted(p.name for p in (tmp_path / "r5" / "checkpoints").iterdir())
    assert left == ["step_1", "step_2"]


def test_sft_dry_run_writes_sft_json(tmp_path):
    result = CliRunner().invoke(app, ["sft", "--output-dir", str(tmp_path), "--run.name", "s1", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "s1" / "configs" / "attempt_1" / "resolved" / "sft.json").is_file()


def test_port_zero_picks_one_free_port_for_server_and_client(fake_plugins, tmp_path):
    # The orchestrator must know the port before inference starts, so "any free port" is
    # chosen at launch and written to both resolved configs.
    result = dry(tmp_path, "--run.name", "p0", "--inference.server.port", "0")
    assert result.exit_code == 0, result.output
    resolved = tmp_path / "p0" / "configs" / "attempt_1" / "resolved"
    port = json.loads((resolved / "inference.json").read_text())["server"]["port"]
    assert port > 0
    client = json.loads((resolved / "orchestrator.json").read_text())["client"]["base_url"]
    assert client == f"http://127.0.0.1:{port}"


def test_resolved_configs_store_local_model_paths_absolute_and_hub_ids_as_given(fake_plugins, tmp_path, monkeypatch):
    """A model given as a relative directory is written absolute into every resolved
    config (the dashboard and other processes read them from elsewhere); a hub id is not."""
    work = tmp_path / "work"
    model = work / "models" / "tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "tokenizer_config.json").write_text('{"prl_renderer": "default"}')
    monkeypatch.chdir(work)
    out = tmp_path / "out"
    for run, model_name in (("local", "models/tiny"), ("hub", "org/Tiny-Model")):
        argv = ["rl", "--output-dir", str(out), "--run.name", run, "--model.name", model_name]
        result = CliRunner().invoke(app, [*argv, "--orchestrator.train.source", SRC, "--dry-run"])
        assert result.exit_code == 0, result.output
    for name in ("trainer", "orchestrator", "inference"):
        local_cfg = json.loads((out / "local" / "configs" / "latest" / "resolved" / f"{name}.json").read_text())
        hub_cfg = json.loads((out / "hub" / "configs" / "latest" / "resolved" / f"{name}.json").read_text())
        assert local_cfg["model"]["name"] == str(model), name
        assert hub_cfg["model"]["name"] == "org/Tiny-Model", name
