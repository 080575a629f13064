"""The commands this distribution adds: ``prl data reverse-text`` and ``prl export``."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from prl_trainer_torch.cli import add_commands
from prl_trainer_torch.reverse_text import lcs_ratio


def _app() -> typer.Typer:
    app = typer.Typer()
    add_commands(app)
    return app


def test_reverse_text_data_has_disjoint_held_out_split(tmp_path):
    result = CliRunner().invoke(_app(), ["data", "reverse-text", "--out", str(tmp_path), "--train", "300", "--val", "30"])
    assert result.exit_code == 0, result.output
    train = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    val = [json.loads(x) for x in (tmp_path / "val.jsonl").read_text().splitlines()]
    assert len(train) == 300 and len(val) == 30
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in val}
    for r in train[:20]:
        assert r["prompt"].endswith(r["completion"][::-1])


def test_export_refuses_an_incomplete_checkpoint(tmp_path):
    (tmp_path / "step_3" / "trainer").mkdir(parents=True)
    result = CliRunner().invoke(_app(), ["export", str(tmp_path / "step_3")])
    assert result.exit_code != 0
    assert "no complete trainer checkpoint" in str(result.exception)


def test_lcs_ratio():
    assert lcs_ratio("cba", "cba") == 1.0
    assert lcs_ratio("", "cba") == 0.0
    assert 0.0 < lcs_ratio("cbx", "cba") < 1.0
