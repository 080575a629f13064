"""Every config snippet and flag of the user-facing contract (the reference's documented
spellings, collected in spec_corpus/) dry-runs: exit 0.

The snippets live in spec_corpus/ as files, and overrides.txt lists the command lines;
each goes through the real CLI (in-process through typer's runner, a few as real
subprocesses). The contract's model, Qwen/Qwen3-0.6B, is put in a test Hugging Face cache,
since a dry run checks that the configured model exists.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prl.cli.main import app

CORPUS = Path(__file__).parent / "spec_corpus"
LINES = [
    line.strip()
    for line in (CORPUS / "overrides.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]


def _argv(line: str, out: Path) -> list[str]:
    tokens = shlex.split(line)
    # `@ NAME` and `--section @ NAME` / `@NAME` name files of the corpus
    tokens = [str(CORPUS / t) if i and tokens[i - 1] == "@" else t for i, t in enumerate(tokens)]
    tokens = [f"@{CORPUS / t[1:]}" if t.startswith("@") and len(t) > 1 else t for t in tokens]
    return tokens + ["--output-dir", str(out), "--dry-run"]


@pytest.fixture
def spec_model(tmp_path, monkeypatch):
    repo = tmp_path / "hf" / "models--Qwen--Qwen3-0.6B"
    (repo / "snapshots" / "0").mkdir(parents=True)
    (repo / "snapshots" / "0" / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))


def test_corpus_covers_every_file():
    used = {t for line in LINES for t in shlex.split(line)}
    files = {p.name for p in CORPUS.glob("*.toml")}
    assert files <= used | {t.lstrip("@") for t in used}, files - used
    assert len(LINES) >= 30


@pytest.mark.parametrize("line", LINES)
def test_spec_line_dry_runs(line, spec_model, tmp_path):
    result = CliRunner().invoke(app, _argv(line, tmp_path / "out"))
    assert result.exit_code == 0, f"prl {line}\n{result.output}"
    assert "Dry run complete" in result.output


@pytest.mark.parametrize("line", [LINES[0], next(x for x in LINES if "inference.vllm" in x)])
def test_spec_line_dry_runs_as_a_process(line, spec_model, tmp_path):
    argv = [sys.executable, "-m", "prl", *_argv(line, tmp_path / "out")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
