"""The trainer checkpoint on a small torch model: what a save holds, what a resume restores
(and what each ``skip_*`` leaves alone), which rank's data cursor it reads, LoRA-only
checkpoints and the one-line full-disk error."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
import torch
from prl_trainer_torch import checkpoint as ckpt
from prl_trainer_torch.lora import apply_lora
from torch import nn

from prl import layout
from prl.config.errors import ConfigError, HostError
from prl.config.sections import CkptConfig, ResumeConfig


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 2)
        self.head = nn.Linear(2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.proj(x))

    def get_output_embeddings(self):  # what apply_lora asks of a transformers model
        return None


def trained(seed: int = 0, steps: int = 2):
    """A model, an AdamW and a scheduler after ``steps`` steps (moments and lr non-trivial)."""
    torch.manual_seed(seed)
    model = Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    for _ in range(steps):
        model(torch.ones(4, 3)).pow(2).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    return model, opt, sched


def save(step_dir: Path, model, opt, sched, progress=None, loader=None, rank=0, **kw) -> None:
    progress = progress or {"step": 7, "total_tokens": 70, "total_samples": 5}
    ckpt.save(step_dir, model, opt, sched, progress, loader, rank, **kw)


def test_resume_restores_weights_optimizer_scheduler_and_progress(tmp_path):
    model, opt, sched = trained(seed=0)
    step_dir = tmp_path / "step_7"
    save(step_dir, model, opt, sched, meta={"model": "m", "tokenizer": "t"})
    assert ckpt.complete_steps(tmp_path) == [7]
    assert json.loads((step_dir / "trainer" / "model.json").read_text()) == {"model": "m", "tokenizer": "t"}

    fresh, fopt, fsched = trained(seed=1, steps=1)
    progress = ckpt.load(step_dir, fresh, fopt, fsched, ResumeConfig())
    assert progress == {"step": 7, "total_tokens": 70, "total_samples": 5}
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, msg=name)
    assert fsched.last_epoch == sched.last_epoch == 2
    assert fopt.param_groups[0]["lr"] == pytest.approx(0.1 / 3)
    moments = [opt.state[p]["exp_avg"] for p in model.parameters()]
    for got, want in zip((fopt.state[p]["exp_avg"] for p in fresh.parameters()), moments, strict=True):
        torch.testing.assert_close(got, want)
    # The step after a resume is the step the uninterrupted run takes.
    for m, o in ((model, opt), (fresh, fopt)):
        m(torch.ones(4, 3)).pow(2).sum().backward()
        o.step()
    torch.testing.assert_close(fresh.proj.weight, model.proj.weight)


def test_skip_flags_leave_their_part_as_the_new_run_built_it(tmp_path):
    model, opt, sched = trained(seed=0)
    save(tmp_path / "step_7", model, opt, sched)
    fresh, fopt, fsched = trained(seed=1, steps=1)
    before = {p: fopt.state[p]["exp_avg"].clone() for p in fresh.parameters()}
    skip = ResumeConfig(skip_optimizer=True, skip_scheduler=True, skip_progress=True)
    progress = ckpt.load(tmp_path / "step_7", fresh, fopt, fsched, skip)
    assert progress == {"step": 0, "total_tokens": 0, "total_samples": 0}
    assert fsched.last_epoch == 1
    for p in fresh.parameters():
        torch.testing.assert_close(fopt.state[p]["exp_avg"], before[p])
    torch.testing.assert_close(fresh.proj.weight, model.proj.weight)  # the weights always load


def test_each_rank_reads_its_own_data_cursor_else_rank_0s(tmp_path):
    model, opt, sched = trained()
    step_dir = tmp_path / "step_7"
    save(step_dir, model, opt, sched, loader={"epoch": 1, "rows": 4}, rank=0)
    ckpt.save(step_dir, model, opt, sched, {"step": 7}, {"epoch": 1, "rows": 9}, 1)
    assert ckpt.load_loader_state(step_dir, 1) == {"epoch": 1, "rows": 9}
    assert ckpt.load_loader_state(step_dir, 0) == {"epoch": 1, "rows": 4}
    assert ckpt.load_loader_state(step_dir, 3) == {"epoch": 1, "rows": 4}  # the world size changed
    assert ckpt.load_loader_state(tmp_path / "step_8", 0) is None


def test_read_model_state_leaves_the_live_model_alone(tmp_path):
    model, opt, sched = trained(seed=0)
    save(tmp_path / "step_7", model, opt, sched)
    other, _, _ = trained(seed=1, steps=0)
    live = {k: v.clone() for k, v in other.state_dict().items()}
    read = ckpt.read_model_state(tmp_path / "step_7", other)
    assert set(read) == set(model.state_dict())
    for name, value in model.state_dict().items():
        torch.testing.assert_close(read[name], value, msg=name)
        torch.testing.assert_close(other.state_dict()[name], live[name], msg=name)


def lora_model():
    model, _, _ = trained(seed=0, steps=0)
    apply_lora(model, NS(target_modules=["proj"], rank=2, alpha=4.0, dropout=0.0))
    nn.init.normal_(model.proj.lora_B.weight)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
    return model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)


def test_a_lora_checkpoint_holds_only_the_adapter_and_resumes_only_as_lora(tmp_path):
    model, opt, sched = lora_model()
    assert set(ckpt.model_state(model, adapter_only=True)) == {"proj.lora_A.weight", "proj.lora_B.weight"}
    assert "proj.weight" in ckpt.model_state(model)
    save(tmp_path / "step_7", model, opt, sched, adapter={"r": 2})
    assert ckpt.is_lora_checkpoint(tmp_path / "step_7")
    assert set(ckpt.read_model_state(tmp_path / "step_7", model, adapter_only=True)) == {
        "proj.lora_A.weight",
        "proj.lora_B.weight",
    }
    fresh, fopt, fsched = lora_model()
    nn.init.zeros_(fresh.proj.lora_B.weight)
    ckpt.load(tmp_path / "step_7", fresh, fopt, fsched, ResumeConfig(), adapter_only=True)
    torch.testing.assert_close(fresh.proj.lora_B.weight, model.proj.lora_B.weight)
    with pytest.raises(ConfigError, match="is a LoRA checkpoint"):
        ckpt.load(tmp_path / "step_7", fresh, fopt, fsched, ResumeConfig())
    full, fopt2, fsched2 = trained()
    save(tmp_path / "step_8", full, fopt2, fsched2)
    assert not ckpt.is_lora_checkpoint(tmp_path / "step_8")
    with pytest.raises(ConfigError, match="holds full weights"):
        ckpt.load(tmp_path / "step_8", fresh, fopt, fsched, ResumeConfig(), adapter_only=True)


def test_a_failed_save_leaves_the_step_unmarked(tmp_path, monkeypatch):
    model, opt, sched = trained()

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt.dcp, "save", full_disk)
    with pytest.raises(HostError, match=r"writing checkpoint .*step_3"):
        save(tmp_path / "step_3", model, opt, sched)
    assert ckpt.complete_steps(tmp_path) == []
    assert not layout.is_complete(tmp_path / "step_3", (layout.TRAINER,))


def test_a_checkpoint_takes_about_weights_and_two_moments():
    model = nn.Linear(10, 10)  # 110 float32 parameters: 440 bytes
    assert ckpt._estimate_bytes(model) == 3 * 440


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS])
def test_disk_errors_become_one_line(tmp_path, code):
    err = ckpt._disk_error(OSError(code, "nope"), tmp_path / "step_1", 1)
    assert isinstance(err, HostError) and str(tmp_path / "step_1") in str(err)


def test_a_torch_short_write_or_a_nearly_full_disk_is_a_full_disk(tmp_path, monkeypatch):
    short = RuntimeError("PytorchStreamWriter failed writing file: unexpected pos 123")
    err = ckpt._disk_error(short, tmp_path / "step_1", 1)
    assert isinstance(err, HostError) and "no space left on device" in str(err)
    # A plain error with room to spare is not a disk problem and stays itself.
    assert ckpt._disk_error(RuntimeError("bad tensor"), tmp_path / "step_1", 1) is None
    assert ckpt._disk_error(RuntimeError("bad tensor"), tmp_path, 1) is None
    # Less free than a checkpoint takes is a full disk, with both figures in KiB.
    free = 8 << 20
    monkeypatch.setattr(ckpt.os, "statvfs", lambda path: NS(f_bavail=free // 4096, f_frsize=4096))
    err = ckpt._disk_error(RuntimeError("bad tensor"), tmp_path, free + 1024)
    assert isinstance(err, HostError) and f"({free // 1024} KiB free, a checkpoint takes about 8193 KiB)" in str(err)
    assert ckpt._disk_error(RuntimeError("bad tensor"), tmp_path, free) is None
    monkeypatch.setattr(ckpt.os, "statvfs", lambda path: NS(f_bavail=0, f_frsize=4096))
    assert isinstance(ckpt._disk_error(RuntimeError("x"), tmp_path, 1), HostError)  # below FULL_BELOW


def test_an_unreadable_filesystem_keeps_the_original_error(tmp_path, monkeypatch):
    def fail(path):
        raise OSError(errno.EIO, "io")

    monkeypatch.setattr(ckpt.os, "statvfs", fail)
    assert ckpt._disk_error(RuntimeError("unexpected pos"), tmp_path, 1) is None


class _Payload:
    """A pickled object that runs code when loaded (what a tampered cursor file could hold)."""

    def __reduce__(self):
        return (print, ("loaded arbitrary code",))


def test_a_data_cursor_file_holding_code_is_refused(tmp_path):
    base = tmp_path / "step_1" / "trainer" / "dataloader"
    base.mkdir(parents=True)
    torch.save({"epoch": _Payload()}, base / "rank_0.pt")
    with pytest.raises(Exception, match="Weights only load failed"):
        ckpt.load_loader_state(tmp_path / "step_1", 0)


def test_checkpoints_go_to_ckpt_output_dir_when_it_is_set(tmp_path):
    run_dir = tmp_path / "outputs" / "run"
    moved = NS(ckpt=CkptConfig(output_dir=tmp_path / "big-disk"))
    assert ckpt.ckpt_root(moved, run_dir) == tmp_path / "big-disk"
    assert ckpt.ckpt_root(NS(ckpt=CkptConfig()), run_dir) == run_dir / "checkpoints"
