"""The commands this distribution adds: ``prl data reverse-text`` and ``prl export``."""

from __future__ import annotations

import json

import pytest
import typer
from prl_trainer_torch.cli import add_commands
from prl_trainer_torch.reverse_text import lcs_ratio
from typer.testing import CliRunner


def _app() -> typer.Typer:
    app = typer.Typer()
    add_commands(app)
    return app


def test_reverse_text_data_has_disjoint_held_out_split(tmp_path):
    result = CliRunner().invoke(
        _app(), ["data", "reverse-text", "--out", str(tmp_path), "--train", "300", "--val", "30"]
    )
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
    assert result.exit_code == 2
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "no complete trainer checkpoint" in lines[0] and "Traceback" not in result.output


def test_lcs_ratio():
    assert lcs_ratio("cba", "cba") == 1.0
    assert lcs_ratio("", "cba") == 0.0
    assert 0.0 < lcs_ratio("cbx", "cba") < 1.0


@pytest.mark.slow
def test_bad_row_met_during_training_is_one_line_and_exit_2(tmp_path, tiny_model):
    import subprocess
    import sys

    rows = [{"prompt": f"p{i}", "completion": f"c{i}"} for i in range(12)]
    rows[7] = {"prompt": "x", "completion": 5}
    data = tmp_path / "bad.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmd = [
        sys.executable,
        "-m",
        "prl",
        "sft",
        "--model.name",
        str(tiny_model),
        "--renderer.name",
        "qwen3",
        "--data.name",
        str(data),
        "--data.batch-size",
        "2",
        "--data.num-workers",
        "2",
        "--data.shuffle",
        "false",
        "--max-steps",
        "5",
        "--output-dir",
        str(tmp_path / "out"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Data error: row 7: column 'completion' must be a list of messages or a string, got int" in proc.stderr
    assert "Traceback" not in proc.stderr
