"""``--resume`` with a custom ``ckpt.output_dir`` looks for checkpoints there, for every
entry point that resumes (``prl rl`` is covered in test_layout.py)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from prl.cli.main import app

pytestmark = pytest.mark.usefixtures("fake_plugins", "hf_cache")
SRC = '[{"name": "t", "env": {"taskset": {"id": "fake-tasks"}}}]'
ENTRIES = {
    "sft": (["sft", "--data.type", "fake"], "trainer"),
    "eval": (["eval", "--source", SRC, "--renderer.name", "default"], "evals"),
}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_resume_finds_checkpoints_in_ckpt_output_dir(tmp_path, entry):
    argv, component = ENTRIES[entry]
    ckpts = tmp_path / "elsewhere"
    base = [*argv, "--output-dir", str(tmp_path / "out"), "--run.name", "r", "--dry-run"]
    base += ["--ckpt.output-dir", str(ckpts), "--resume"]
    missing = CliRunner().invoke(app, base)
    assert missing.exit_code == 2, missing.output
    assert f"--resume: no complete checkpoint found in {ckpts}" in missing.output
    (ckpts / "step_3" / component).mkdir(parents=True)
    (ckpts / "step_3" / component / "COMPLETE").write_text("")
    found = CliRunner().invoke(app, base)
    assert found.exit_code == 0, found.output
