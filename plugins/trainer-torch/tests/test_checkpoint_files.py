"""What a trainer checkpoint writes: a LoRA checkpoint's model part holds only the adapter,
its adapter_config.json is the adapter's, and the small files reach the disk before the
marker that vouches for them."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace as NS

import torch
import torch.distributed.checkpoint as dcp
from prl_trainer_torch import checkpoint as ckpt
from prl_trainer_torch.lora import apply_lora
from torch import nn


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 2)

    def get_output_embeddings(self):
        return None


def lora_parts():
    torch.manual_seed(0)
    model = Tiny()
    apply_lora(model, NS(target_modules=["proj"], rank=2, alpha=2.0, dropout=0.0))
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    return model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)


def saved_keys(step_dir) -> set[str]:
    meta = dcp.FileSystemReader(str(step_dir / "trainer")).read_metadata()
    return set(meta.state_dict_metadata)


def test_a_lora_checkpoint_stores_the_adapter_and_its_config_only(tmp_path):
    adapter = {"peft_type": "LORA", "r": 2, "lora_alpha": 2.0, "target_modules": ["proj"]}
    ckpt.save(tmp_path / "step_1", *lora_parts(), {"step": 1}, None, 0, adapter=adapter)
    models = {k for k in saved_keys(tmp_path / "step_1") if k.startswith("model.")}
    assert models == {"model.proj.lora_A.weight", "model.proj.lora_B.weight"}  # not the frozen base
    assert json.loads((tmp_path / "step_1" / "trainer" / ckpt.ADAPTER_CONFIG).read_text()) == adapter


def test_the_small_files_are_fsynced_before_the_marker(tmp_path, monkeypatch):
    from prl import fsutil

    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(fsutil.os, "fsync", fsync)
    ckpt.save(tmp_path / "step_1", *lora_parts(), {"step": 1}, {"epoch": 0, "rows": 1}, 0, adapter={"r": 2})
    assert any(name.startswith(f".{ckpt.ADAPTER_CONFIG}") for name in synced)
    assert any(name.startswith(".rank_0.pt") for name in synced)


def test_the_shards_and_their_metadata_are_fsynced_before_the_marker(tmp_path, monkeypatch):
    # The COMPLETE marker vouches for the weights: a crash right after it must not leave a
    # resume reading shards the page cache never wrote out.
    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    ckpt.save(tmp_path / "step_1", *lora_parts(), {"step": 1}, None, 0)
    marker = next(i for i, name in enumerate(synced) if "COMPLETE" in name.upper())
    shards = [i for i, name in enumerate(synced) if name.endswith(".distcp")]
    metadata = [i for i, name in enumerate(synced) if name.startswith(".metadata")]
    assert shards and metadata and max(shards + metadata) < marker, synced
