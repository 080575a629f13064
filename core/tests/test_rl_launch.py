"""The RL process plan and the launch-time cleanup of batches/ and broadcasts/."""

from __future__ import annotations

import sys
from types import SimpleNamespace as NS
from typing import ClassVar, Literal

import pytest

from prl import hookimpl
from prl.contracts import Trainer, TrainerBackendConfig
from prl.plugins import PluginError, register_inline, unregister_inline
from prl.rl_launch import build_processes, prepare_scratch


class PlainTrainer(Trainer):
    """A trainer plugin that keeps the contract's default process plan."""

    type: ClassVar[str] = "plain"

    class Config(TrainerBackendConfig):
        type: Literal["plain"] = "plain"

    @classmethod
    def run_sft(cls, config):
        return 0

    @classmethod
    def run_rl(cls, config):
        return 0


class PlainPlugin:
    @hookimpl
    def prl_register_trainers(self):
        return [PlainTrainer]


@pytest.fixture
def plain_trainer():
    register_inline(PlainPlugin(), "plain-trainer")
    yield
    unregister_inline("plain-trainer")


def _config(inference=True, port=8000):
    return NS(
        run=NS(name="demo"), env_vars={"FOO": "1"}, resume=None, ckpt=None,
        inference=NS(server=NS(host="127.0.0.1", port=port), env_vars={"WHO": "inference"}) if inference else None,
        orchestrator=NS(env_vars={"WHO": "orchestrator", "FOO": "2"}),
        trainer=NS(type="plain", num_workers=1, env_vars={"WHO": "trainer", "PRL_RUN_NAME": "hijack"}),
    )  # fmt: skip


def test_plan_starts_inference_orchestrator_trainer(tmp_path, plain_trainer):
    cfg_dir, log_dir = tmp_path / "configs" / "attempt_1", tmp_path / "logs" / "attempt_1"
    procs = build_processes(_config(), tmp_path, cfg_dir, log_dir)
    assert [p.name for p in procs] == ["inference", "orchestrator", "trainer"]
    inf, orch, trainer = procs
    assert inf.argv == [sys.executable, "-m", "prl", "inference", "@", str(cfg_dir / "resolved" / "inference.json")]
    assert orch.argv[-3:] == ["orchestrator", "@", str(cfg_dir / "resolved" / "orchestrator.json")]
    assert trainer.argv == [sys.executable, "-m", "prl", "trainer", "@", str(cfg_dir / "resolved" / "trainer.json")]
    assert trainer.log_path == log_dir / "trainer.log" and inf.log_path == log_dir / "inference.log"
    assert inf.ready_file == cfg_dir / "resolved" / "inference.address"
    assert inf.env["PRL_READY_FILE"] == str(inf.ready_file)
    assert inf.service and inf.health_url == "http://127.0.0.1:8000" and inf.role == "inference"
    assert not orch.service and orch.ready_file is None and orch.health_url is None
    assert not trainer.service and trainer.role == "trainer"
    for p in procs:
        assert p.env["FOO"] == ("2" if p.name == "orchestrator" else "1") and p.env["PRL_RUN_NAME"] == "demo"
        assert p.env["WHO"] == p.name  # each component's own env_vars, over the run's
        assert p.env["PRL_ATTEMPT_CONFIG_DIR"] == str(cfg_dir) and p.env["PRL_ATTEMPT_LOG_DIR"] == str(log_dir)


def test_port_zero_has_no_health_url_but_a_ready_file(tmp_path, plain_trainer):
    inf = build_processes(_config(port=0), tmp_path, tmp_path / "c", tmp_path / "l")[0]
    assert inf.service and inf.health_url is None and inf.ready_file is not None


def test_the_trainer_plugin_decides_its_processes(tmp_path, plain_trainer):
    cfg = _config()
    cfg.trainer.type = "missing"
    with pytest.raises(PluginError, match="no trainer 'missing' is installed"):
        build_processes(cfg, tmp_path, tmp_path / "c", tmp_path / "l")


def test_no_inference_when_switched_off(tmp_path, plain_trainer):
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
