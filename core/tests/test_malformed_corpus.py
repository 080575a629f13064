"""Every malformed config in malformed/ fails with its message, exit code 2, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prl.cli.main import app

CORPUS = Path(__file__).parent / "malformed"
CASES = json.loads((CORPUS / "cases.json").read_text())


def test_corpus_is_large_enough():
    assert len(CASES) >= 30
    assert {p.name for p in CORPUS.iterdir()} - {"cases.json"} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_config(name, fake_plugins, tmp_path):
    case = CASES[name]
    argv = [case["command"], "@", str(CORPUS / name), "--output-dir", str(tmp_path), "--dry-run"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for expected in case["expect"]:
        assert expected in result.output, f"{expected!r} not in:\n{result.output}"
    # nothing is created for a config that does not validate
    assert not any(tmp_path.iterdir())


def test_missing_config_file(tmp_path):
    result = CliRunner().invoke(app, ["rl", "@", str(tmp_path / "nope.toml")])
    assert result.exit_code == 2
    assert f"Config file not found: {tmp_path / 'nope.toml'}" in result.output
