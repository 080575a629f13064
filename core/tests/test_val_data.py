"""[val] needs a dataset: a validation pass reads its data to the end when the trainer
starts, and fake data never ends, so the trainer would hang there filling memory; the
config refuses it in one line instead."""

from __future__ import annotations

from typer.testing import CliRunner

from prl.cli.main import app


def sft(*flags: str):
    argv = ["sft", "--model.name", "m", "--data.name", "d", *flags, "--dry-run"]
    return CliRunner().invoke(app, argv, env={"COLUMNS": "200"})


def test_fake_validation_data_is_refused_before_the_run_starts():
    result = sft("--val.data.type", "fake")
    assert result.exit_code == 2
    assert '--val: Value error, data.type: validation needs a dataset; "fake" data never ends' in result.output


def test_a_validation_dataset_and_fake_training_data_still_pass():
    assert sft("--val.data.name", "v").exit_code == 0
    assert sft("--data.type", "fake", "--val.data.name", "v").exit_code == 0
