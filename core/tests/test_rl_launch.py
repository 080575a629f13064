"""The RL process plan and the launch-time cleanup of batches/ and broadcasts/."""

from __future__ import annotations

import sys
from types import SimpleNamespace as NS

from prl.rl_launch import build_processes, prepare_scratch


def _config(workers=1, inference=True, port=8000, gpus=(0, 0)):
    return NS(
        run=NS(name="demo"), env_vars={"FOO": "1"}, resume=None,
        inference=NS(server=NS(host="127.0.0.1", port=port)) if inference else None,
        deployment=NS(num_infer_gpus=gpus[0], num_train_gpus=gpus[1]),
        trainer=NS(num_workers=workers),
    )  # fmt: skip


def test_plan_starts_inference_orchestrator_trainer(tmp_path):
    cfg_dir, log_dir = tmp_path / "configs" / "attempt_1", tmp_path / "logs" / "attempt_1"
    procs = build_processes(_config(), tmp_path, cfg_dir, log_dir)
    assert [p.name for p in procs] == ["inference", "orchestrator", "trainer"]
    inf, orch, trainer = procs
    assert inf.argv == [sys.executable, "-m", "prl", "inference", "@", str(cfg_dir / "resolved" / "inference.json")]
    assert orch.argv[-3:] == ["orchestrator", "@", str(cfg_dir / "resolved" / "orchestrator.json")]
    assert trainer.log_path == log_dir / "trainer.log" and inf.log_path == log_dir / "inference.log"
    assert inf.ready_file == cfg_dir / "resolved" / "inference.address"
    assert inf.env["PRL_READY_FILE"] == str(inf.ready_file) and inf.env["PRL_HEALTH_URL"] == "http://127.0.0.1:8000"
    assert orch.ready_file is None and "PRL_HEALTH_URL" not in orch.env
    for p in procs:
        assert p.env["FOO"] == "1" and p.env["PRL_RUN_NAME"] == "demo"
        assert p.env["PRL_ATTEMPT_CONFIG_DIR"] == str(cfg_dir) and p.env["PRL_ATTEMPT_LOG_DIR"] == str(log_dir)


def test_multi_worker_trainer_uses_torchrun_and_gpus_split(tmp_path):
    procs = build_processes(_config(workers=2, gpus=(1, 2)), tmp_path, tmp_path / "c", tmp_path / "l")
    trainer = procs[-1]
    assert trainer.argv[1:3] == ["-m", "torch.distributed.run"] and "--nproc-per-node=2" in trainer.argv
    assert trainer.argv[-5:-2] == ["-m", "prl", "trainer"]
    assert procs[0].env["CUDA_VISIBLE_DEVICES"] == "0" and trainer.env["CUDA_VISIBLE_DEVICES"] == "1,2"


def test_no_inference_when_switched_off(tmp_path):
    assert [p.name for p in build_processes(_config(inference=False), tmp_path, tmp_path / "c", tmp_path / "l")] == [
        "orchestrator", "trainer",
    ]  # fmt: skip


def _scratch(tmp_path):
    for sub in ("batches", "broadcasts"):
        for s in range(0, 6):
            (tmp_path / sub / f"step_{s}").mkdir(parents=True)


def _left(tmp_path, sub):
    return sorted(int(p.name[5:]) for p in (tmp_path / sub).iterdir()) if (tmp_path / sub).exists() else []


def test_fresh_launch_clears_scratch(tmp_path):
    _scratch(tmp_path)
    prepare_scratch(tmp_path, None)
    assert _left(tmp_path, "batches") == [] and _left(tmp_path, "broadcasts") == []


def test_resume_keeps_scratch_up_to_the_step(tmp_path):
    _scratch(tmp_path)
    prepare_scratch(tmp_path, 3)
    assert _left(tmp_path, "batches") == [0, 1, 2, 3]
    # version 3 is re-broadcast by the trainer at start: its old markers must go too
    assert _left(tmp_path, "broadcasts") == [0, 1, 2]
