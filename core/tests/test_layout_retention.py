"""Retention's edges and the marker's durability: keep_interval alone, no complete step yet,
steps after the one just saved, directories another process removes first, and a marker
that reaches the disk before it is trusted."""

from __future__ import annotations

import os
from pathlib import Path

from prl import layout
from prl.config.sections import CkptConfig

RL = layout.COMPONENTS["rl"]


def _save(root: Path, step: int, parts=RL) -> None:
    step_dir = layout.step_dir(root, step)
    for part in parts:
        layout.begin(step_dir, part)
        layout.mark_complete(step_dir, part)


def _crashed(root: Path, step: int) -> None:
    layout.begin(layout.step_dir(root, step), layout.TRAINER)


def test_keep_interval_alone_keeps_its_multiples_and_the_newest_step(tmp_path):
    for step in (1, 2, 3, 4, 5):
        _save(tmp_path, step)
    # step 5 is not a multiple of 2, but it is the step a resume loads: it stays.
    assert layout.retain(tmp_path, CkptConfig(keep_interval=2), RL) == [1, 3]
    assert list(layout.step_dirs(tmp_path)) == [2, 4, 5]
    _save(tmp_path, 7)
    assert layout.retain(tmp_path, CkptConfig(keep_interval=2), RL) == [5]
    assert list(layout.step_dirs(tmp_path)) == [2, 4, 7]


def test_without_a_complete_step_nothing_is_deleted(tmp_path):
    _crashed(tmp_path, 1)
    _crashed(tmp_path, 2)
    assert layout.retain(tmp_path, CkptConfig(keep_last=1, keep_interval=5), RL) == []
    assert list(layout.step_dirs(tmp_path)) == [1, 2]
    # Step 0 too (every interval saves it), even where no keep_interval multiple covers it.
    _crashed(tmp_path, 0)
    assert layout.retain(tmp_path, CkptConfig(keep_last=1), RL) == []
    assert list(layout.step_dirs(tmp_path)) == [0, 1, 2]


def test_steps_after_the_one_just_saved_are_left_alone(tmp_path):
    for step in (1, 2, 3, 4):
        _save(tmp_path, step)
    # Saving step 2 again after a resume: 3 and 4 belong to the earlier attempt.
    assert layout.retain(tmp_path, CkptConfig(keep_last=1), RL, upto=2) == [1]
    assert list(layout.step_dirs(tmp_path)) == [2, 3, 4]


def test_retention_tolerates_a_step_removed_under_it(tmp_path, monkeypatch):
    for step in (1, 2):
        _save(tmp_path, step)
    seen = []
    monkeypatch.setattr(layout.shutil, "rmtree", lambda path, ignore_errors=False: seen.append(ignore_errors))
    assert layout.retain(tmp_path, CkptConfig(keep_last=1), RL) == [1]
    assert seen == [True]


def test_the_marker_reaches_the_disk_before_it_is_trusted(tmp_path, monkeypatch):
    from prl import fsutil

    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(fsutil.os, "fsync", fsync)
    layout.mark_complete(layout.step_dir(tmp_path, 1), layout.TRAINER)
    assert any(Path(p).name.startswith(f".{layout.MARKER}") for p in synced)
