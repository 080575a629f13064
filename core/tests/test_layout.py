"""The run layout as a user meets it: which checkpoint --resume picks, what retention keeps,
and how a bad resume target is reported (``docs/checkpoints.md``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from typer.testing import CliRunner

from prl import layout
from prl.cli.main import app
from prl.config.sections import CkptConfig, ResumeConfig
from prl.orchestrator import checkpoint as orch_ckpt

# Dry runs check that the configured model exists; these tests' models are in a test cache.
pytestmark = pytest.mark.usefixtures("hf_cache")

RL = layout.COMPONENTS["rl"]
SRC = '[{"name": "alpha", "env": {"taskset": {"id": "fake-tasks"}}}]'


def _save(root: Path, step: int, parts=RL) -> Path:
    """A step whose parts were saved and marked complete, as trainer and orchestrator do."""
    step_dir = layout.step_dir(root, step)
    for part in parts:
        (layout.begin(step_dir, part) / "state.bin").write_bytes(b"x")
        layout.mark_complete(step_dir, part)
    return step_dir


def _crashed(root: Path, step: int, part: str = layout.TRAINER) -> Path:
    """A step whose ``part`` died mid-save: files on disk, no marker."""
    step_dir = layout.step_dir(root, step)
    (layout.begin(step_dir, part) / "state.bin").write_bytes(b"half")
    return step_dir


def _steps(root: Path) -> list[int]:
    return list(layout.step_dirs(root))


def dry(tmp_path, *extra):
    argv = ["rl", "--output-dir", str(tmp_path), "--orchestrator.train.source", SRC, "--dry-run", *extra]
    return CliRunner().invoke(app, argv)


# ---- resume picks only complete steps ------------------------------------------------
def test_resume_skips_a_step_that_crashed_mid_save(tmp_path):
    root = tmp_path / "checkpoints"
    _save(root, 2)
    _save(root, 4, parts=(layout.ORCHESTRATOR,))
    _crashed(root, 4)  # the trainer died while writing step 4
    assert layout.find_resume(ResumeConfig(), root, RL) == root / "step_2"
    # Both processes of the run agree on it.
    config = NS(resume=ResumeConfig(), ckpt=None)
    assert orch_ckpt.resume_dir(config, tmp_path) == root / "step_2"


def test_rewriting_a_step_withdraws_its_old_marker(tmp_path):
    root = tmp_path / "checkpoints"
    _save(root, 1)
    step_dir = _save(root, 2)
    _crashed(root, 2)  # a later attempt saves step 2 again and dies half-way
    assert not layout.is_complete(step_dir, RL)
    assert layout.find_resume(ResumeConfig(), root, RL) == root / "step_1"


def test_plain_resume_without_a_complete_step_names_what_is_missing(tmp_path):
    root = tmp_path / "checkpoints"
    _save(root, 1, parts=(layout.TRAINER,))  # the orchestrator never saved step 1
    with pytest.raises(FileNotFoundError, match="--resume: no complete checkpoint") as err:
        layout.find_resume(ResumeConfig(), root, RL)
    assert "orchestrator/COMPLETE" in str(err.value)


def test_resume_step_of_an_incomplete_step_names_the_flag(fake_plugins, tmp_path):
    run = tmp_path / "r1"
    _save(run / "checkpoints", 1)
    _crashed(run / "checkpoints", 2)
    result = dry(tmp_path, "--run.name", "r1", "--resume.step", "2")
    assert result.exit_code == 2
    assert "--resume.step" in result.output and "step 2" in result.output
    assert dry(tmp_path, "--run.name", "r1", "--resume.step", "1").exit_code == 0


def test_fork_from_an_incomplete_step_names_the_flag(fake_plugins, tmp_path):
    other = _crashed(tmp_path / "other" / "checkpoints", 3)
    result = dry(tmp_path, "--run.name", "fork", "--resume.dir", str(other))
    assert result.exit_code == 2 and "--resume.dir" in result.output
    _save(tmp_path / "other" / "checkpoints", 3)
    assert dry(tmp_path, "--run.name", "fork2", "--resume.dir", str(other)).exit_code == 0


def test_resume_looks_in_ckpt_output_dir(fake_plugins, tmp_path):
    elsewhere = tmp_path / "ckpts"
    assert dry(tmp_path, "--run.name", "r2", "--ckpt.output-dir", str(elsewhere)).exit_code == 0
    _save(elsewhere, 5)
    result = dry(tmp_path, "--run.name", "r2", "--ckpt.output-dir", str(elsewhere), "--resume")
    assert result.exit_code == 0, result.output


# ---- retention -----------------------------------------------------------------------
def test_retention_keeps_newest_and_interval_multiples(tmp_path):
    root = tmp_path / "checkpoints"
    for step in range(1, 8):
        _save(root, step)
        layout.retain(root, CkptConfig(interval=1, keep_last=2, keep_interval=3), RL, upto=step)
    assert _steps(root) == [3, 6, 7]


def test_retention_off_keeps_everything(tmp_path):
    root = tmp_path / "checkpoints"
    for step in range(1, 5):
        _save(root, step)
        assert layout.retain(root, CkptConfig(interval=1), RL, upto=step) == []
    assert layout.retain(root, None, RL) == []
    assert _steps(root) == [1, 2, 3, 4]


def test_retention_never_drops_the_last_complete_step_for_one_still_being_written(tmp_path):
    root = tmp_path / "checkpoints"
    keep_one = CkptConfig(interval=1, keep_last=1)
    _save(root, 1)
    # The trainer finished step 2 but the orchestrator has not marked it yet, and the
    # orchestrator already saved step 3 (it runs ahead of the trainer).
    _save(root, 2, parts=(layout.TRAINER,))
    _save(root, 3, parts=(layout.ORCHESTRATOR,))
    assert layout.retain(root, keep_one, RL, upto=2) == []
    layout.mark_complete(layout.step_dir(root, 2), layout.ORCHESTRATOR)
    assert layout.retain(root, keep_one, RL, upto=2) == [1]
    assert _steps(root) == [2, 3]


def test_retention_removes_crash_leftovers_older_than_the_newest_complete_step(tmp_path):
    root = tmp_path / "checkpoints"
    _crashed(root, 1)
    _save(root, 2)
    _save(root, 3)
    assert layout.retain(root, CkptConfig(interval=1, keep_last=2), RL, upto=3) == [1]
    assert _steps(root) == [2, 3]


# ---- saving and cleaning -------------------------------------------------------------
def test_interval_saves_and_the_final_step(tmp_path):
    ckpt = CkptConfig(interval=3)
    assert [s for s in range(1, 8) if layout.save_due(ckpt, s, final=s == 7)] == [3, 6, 7]
    assert [s for s in range(1, 8) if layout.save_due(CkptConfig(), s, final=s == 7)] == [7]
    assert not layout.save_due(None, 7, final=True)


def test_clean_after_a_resume_step_keeps_earlier_steps(tmp_path):
    for step in (1, 2, 3):
        _save(tmp_path / "checkpoints", step)
        for sub in layout.SCRATCH:
            (tmp_path / sub / f"step_{step}").mkdir(parents=True)
    layout.clean_after(tmp_path, tmp_path / "checkpoints", 2)
    for sub in ("checkpoints", *layout.SCRATCH):
        assert _steps(tmp_path / sub) == [1, 2], sub
