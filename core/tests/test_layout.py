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


def test_a_missing_resume_target_is_a_resume_error_naming_both_parts(tmp_path):
    with pytest.raises(layout.CheckpointNotFound) as err:
        layout.find_resume(ResumeConfig(), tmp_path, RL)
    assert err.value.title == "Resume error"  # the heading the CLI prints above the message
    assert "trainer/COMPLETE and orchestrator/COMPLETE" in str(err.value)


def test_resume_step_is_this_runs_step_and_none_for_a_fork_or_a_fresh_run(tmp_path):
    root = tmp_path / "checkpoints"
    _save(root, 2)
    _save(root, 5)
    assert layout.resume_step(ResumeConfig(), root, RL) == 5
    assert layout.resume_step(ResumeConfig(step=2), root, RL) == 2
    assert layout.resume_step(None, root, RL) is None
    other = _save(tmp_path / "other", 3)
    assert layout.resume_step(ResumeConfig(dir=other), root, RL) is None


def _scratch(run: Path, steps) -> None:
    for sub in layout.SCRATCH:
        for step in steps:
            (run / sub / f"step_{step}" / "x").mkdir(parents=True)


def test_a_fresh_launch_clears_batches_and_broadcasts(tmp_path):
    _scratch(tmp_path, (1, 2))
    (tmp_path / "checkpoints").mkdir()
    layout.clear_scratch(tmp_path, None)
    assert not (tmp_path / "batches").exists() and not (tmp_path / "broadcasts").exists()
    assert (tmp_path / "checkpoints").is_dir()


def test_a_resume_from_n_keeps_batches_to_n_and_broadcasts_before_n(tmp_path):
    _scratch(tmp_path, (1, 2, 3, 4))
    layout.clear_scratch(tmp_path, 3)
    assert _steps(tmp_path / "batches") == [1, 2, 3]
    assert _steps(tmp_path / "broadcasts") == [1, 2]  # version 3 is broadcast again at start


def test_removing_later_steps_goes_through_read_only_leftovers(tmp_path, monkeypatch):
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    seen = []
    real = layout.shutil.rmtree

    def rmtree(path, ignore_errors=False):
        seen.append(ignore_errors)
        real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(layout.shutil, "rmtree", rmtree)
    assert layout.remove_steps_after(tmp_path, 1) == [2]
    # A step another process is deleting at the same time must not fail the launch.
    assert seen == [True] and _steps(tmp_path) == [1]


# ---- the orchestrator's part ------------------------------------------------------------
def test_orchestrator_state_round_trips_and_marks_its_part(tmp_path):
    state = {"step": 4, "rng": [1, 2, 3], "sources": {"alpha": {"cursor": 9}}}
    path = orch_ckpt.save_state(tmp_path, 4, state)
    assert path == tmp_path / "step_4" / "orchestrator" / "progress.pt"
    assert layout.is_complete(tmp_path / "step_4", (layout.ORCHESTRATOR,))
    assert orch_ckpt.load_state(tmp_path / "step_4") == state
    with pytest.raises(FileNotFoundError, match=r"--resume: orchestrator state .*step_5.*progress.pt is missing"):
        orch_ckpt.load_state(tmp_path / "step_5")


def test_orchestrator_state_reaches_the_disk_before_its_marker(tmp_path, monkeypatch):
    import os

    from prl import fsutil

    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(fsutil.os, "fsync", fsync)
    orch_ckpt.save_state(tmp_path, 1, {"step": 1})
    assert any("progress.pt" in p for p in synced)


def test_orchestrator_save_on_a_full_disk_is_one_line(tmp_path, monkeypatch):
    import errno

    from prl.config.errors import HostError

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "progress.pt")

    monkeypatch.setattr(orch_ckpt, "write_atomic", full)
    with pytest.raises(HostError, match=r"writing checkpoint .*step_1: No space left on device \(progress.pt\)"):
        orch_ckpt.save_state(tmp_path, 1, {"step": 1})
    assert not layout.is_complete(tmp_path / "step_1", (layout.ORCHESTRATOR,))


def test_orchestrator_saves_at_the_interval_and_the_last_step():
    cfg = NS(max_steps=7, ckpt=CkptConfig(interval=3))
    assert [s for s in range(1, 8) if orch_ckpt.is_due(cfg, s)] == [3, 6, 7]
    assert [s for s in range(1, 8) if orch_ckpt.is_due(NS(max_steps=None, ckpt=CkptConfig(interval=3)), s)] == [3, 6]
    assert not any(orch_ckpt.is_due(NS(max_steps=7), s) for s in range(1, 8))


def test_a_fork_target_that_is_not_a_step_or_is_missing_is_named(tmp_path):
    with pytest.raises(layout.CheckpointNotFound, match=r"--resume.dir must end in step_<digits>, got .*/ckpt"):
        layout.find_resume(ResumeConfig.model_construct(dir=tmp_path / "ckpt", step=None), tmp_path, RL)
    with pytest.raises(layout.CheckpointNotFound, match=r"--resume.dir: checkpoint directory not found: .*step_9"):
        layout.find_resume(ResumeConfig(dir=tmp_path / "step_9"), tmp_path, RL)


def test_a_fresh_launch_clears_scratch_another_process_is_deleting(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(layout.shutil, "rmtree", lambda path, ignore_errors=False: seen.append(ignore_errors))
    layout.clear_scratch(tmp_path, None)
    assert seen == [True, True]


def test_only_step_directories_are_steps(tmp_path):
    _save(tmp_path, 2)
    (tmp_path / "step_5").write_text("a stray file, not a checkpoint")
    (tmp_path / "notes").mkdir()
    assert layout.step_dirs(tmp_path) == {2: tmp_path / "step_2"}


def test_the_orchestrator_looks_for_checkpoints_where_ckpt_output_dir_says(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    assert orch_ckpt.checkpoint_root(NS(ckpt=CkptConfig(output_dir=elsewhere)), tmp_path / "run") == elsewhere
    assert orch_ckpt.checkpoint_root(NS(), tmp_path / "run") == tmp_path / "run" / "checkpoints"
    assert orch_ckpt.resume_dir(NS(), tmp_path / "run") is None  # no [resume]: a fresh run


def test_an_explicit_resume_step_needs_only_the_orchestrators_part(tmp_path):
    _save(tmp_path / "checkpoints", 3, parts=(layout.ORCHESTRATOR,))
    config = NS(resume=ResumeConfig(step=3), ckpt=None)
    assert orch_ckpt.resume_dir(config, tmp_path) == tmp_path / "checkpoints" / "step_3"


def test_resume_step_says_whether_the_step_is_missing_or_which_part_is_unfinished(tmp_path):
    # The two cases need different fixes: a wrong step number, or a save that died midway.
    with pytest.raises(layout.CheckpointNotFound) as err:
        layout.find_resume(ResumeConfig(step=4), tmp_path, RL)
    assert str(err.value).endswith("(step_4: it does not exist)")
    _save(tmp_path, 4, parts=(layout.ORCHESTRATOR,))
    with pytest.raises(layout.CheckpointNotFound) as err:
        layout.find_resume(ResumeConfig(step=4), tmp_path, RL)
    assert str(err.value).endswith("(step_4: no trainer/COMPLETE)")
