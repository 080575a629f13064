"""[val] with fake data (the benchmarking data the reference allows there too) is
accepted: the trainer validates on one batch of random documents, as
plugins/trainer-torch/tests/test_loader_val.py shows; a dataset works as before."""

from __future__ import annotations

from typer.testing import CliRunner

from prl.cli.main import app


def sft(*flags: str):
    argv = ["sft", "--model.name", "m", "--data.name", "d", *flags, "--dry-run"]
    return CliRunner().invoke(app, argv, env={"COLUMNS": "200"})


def test_fake_validation_data_dry_runs():
    result = sft("--val.data.type", "fake")
    assert result.exit_code == 0, result.output
    assert "Dry run complete" in result.output


def test_a_validation_dataset_and_fake_training_data_still_pass():
    assert sft("--val.data.name", "v").exit_code == 0
    assert sft("--data.type", "fake", "--val.data.name", "v").exit_code == 0
