"""What the torch trainer asks ``prl rl`` to start: one process, or its own torchrun."""

from __future__ import annotations

import sys

from prl_trainer_torch.trainer import TorchTrainer

from prl.config.components import TrainerConfig
from prl.plugins import TRAINERS, get_registry


def test_torch_is_the_default_trainer():
    assert get_registry().default_tag(TRAINERS) == "torch"
    assert TrainerConfig().type == "torch"


def test_one_worker_is_one_prl_trainer_process(tmp_path):
    cfg = TrainerConfig(num_workers=1)
    (proc,) = TorchTrainer.rl_processes(cfg, tmp_path / "trainer.json", tmp_path / "logs", {"A": "1"})
    assert proc.argv == [sys.executable, "-m", "prl", "trainer", "@", str(tmp_path / "trainer.json")]
    assert proc.role == "trainer" and not proc.service and proc.env["A"] == "1"


def test_several_workers_run_under_the_exit_code_keeping_torchrun(tmp_path):
    cfg = TrainerConfig(num_workers=2)
    (proc,) = TorchTrainer.rl_processes(cfg, tmp_path / "trainer.json", tmp_path / "logs", {})
    assert proc.argv[1:3] == ["-m", "prl.torchrun"] and "--nproc-per-node=2" in proc.argv
    assert proc.argv[-3:] == ["-m", "prl_trainer_torch.rl", str(tmp_path / "trainer.json")]
    assert f"--log-dir={tmp_path / 'logs' / 'trainer' / 'torchrun'}" in proc.argv
    assert proc.log_path == tmp_path / "logs" / "trainer.log" and proc.env["NCCL_NVLS_ENABLE"] == "0"
