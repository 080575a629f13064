"""The save side of a trainer checkpoint across ranks: only rank 0 withdraws and writes the
marker and the model names, every rank writes its own cursor, and a save that dies on a
full disk leaves the step (even one that was complete before) unmarked."""

from __future__ import annotations

import json
import os

import pytest
import torch
from prl_trainer_torch import checkpoint as ckpt
from torch import nn

from prl import layout
from prl.config.errors import HostError


def parts():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)


def test_a_rank_other_than_0_writes_its_cursor_but_no_marker_or_names(tmp_path):
    step_dir = tmp_path / "step_2"  # not made yet: rank 1 may get there first
    ckpt.save(step_dir, *parts(), {"step": 2}, {"epoch": 0, "rows": 6}, 1, meta={"model": "m"})
    assert ckpt.load_loader_state(step_dir, 1) == {"epoch": 0, "rows": 6}
    assert not (step_dir / "trainer" / "model.json").exists()
    assert not layout.is_complete(step_dir, (layout.TRAINER,))


def test_rank_0_without_names_writes_no_model_json(tmp_path):
    ckpt.save(tmp_path / "step_2", *parts(), {"step": 2}, None, 0)
    assert layout.is_complete(tmp_path / "step_2", (layout.TRAINER,))
    assert not (tmp_path / "step_2" / "trainer" / "model.json").exists()


def test_the_model_names_reach_the_disk_before_the_marker(tmp_path, monkeypatch):
    from prl import fsutil

    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(fsutil.os, "fsync", fsync)
    ckpt.save(tmp_path / "step_1", *parts(), {"step": 1}, None, 0, meta={"model": "m", "tokenizer": "t"})
    assert any("model.json" in p for p in synced)
    assert json.loads((tmp_path / "step_1" / "trainer" / "model.json").read_text()) == {"model": "m", "tokenizer": "t"}


def test_rewriting_a_complete_step_that_then_fails_leaves_it_unmarked(tmp_path, monkeypatch):
    step_dir = tmp_path / "step_3"
    ckpt.save(step_dir, *parts(), {"step": 3}, None, 0)
    assert layout.is_complete(step_dir, (layout.TRAINER,))

    def short_write(*args, **kwargs):
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: unexpected pos 64")

    monkeypatch.setattr(ckpt.dcp, "save", short_write)
    with pytest.raises(HostError, match="no space left on device"):
        ckpt.save(step_dir, *parts(), {"step": 3}, None, 0)
    # The old marker must not vouch for shards that were being rewritten.
    assert not layout.is_complete(step_dir, (layout.TRAINER,))
