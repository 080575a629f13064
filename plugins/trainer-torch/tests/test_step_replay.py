"""``prl replay <run_dir> --step N``: a recorded RL step recomputed and compared.

The slow tests make one real tiny ``prl rl`` run (three CPU steps, a checkpoint every
step, the token export on) and replay its steps with the real command; the fast ones give
the command run directories that lack what a replay needs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
import typer
from prl_trainer_torch.cli import add_commands
from prl_trainer_torch.token_export import TokenExporter, batch_path, read_batch
from typer.testing import CliRunner

from prl.config.components import TrainerConfig


def _replay(*args) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "prl", "replay", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    pytest.importorskip("prl_model_init")
    pytest.importorskip("prl_inference_torch")
    pytest.importorskip("prl_launcher_local")
    pytest.importorskip("prl_tasks_builtin")
    from prl_model_init.build import make_model

    from prl.cli.commands import cmd_rl
    from prl.testing.configs import tiny_rl_toml

    base = tmp_path_factory.mktemp("replay")
    model = make_model(base / "model", preset="tiny")
    overrides = {"max_steps": 3, "ckpt": {"interval": 1}, "trainer": {"enable_token_export": True}}
    assert cmd_rl(["@", str(tiny_rl_toml(base, model, overrides)), "--run.name", "r"]) == 0
    return base / "outputs" / "r"


@pytest.mark.slow
@pytest.mark.parametrize(("step", "start"), [(2, "checkpoints/step_1"), (1, "the model's initial weights")])
def test_a_recorded_step_replays_bitwise_equal(run_dir, step, start):
    proc = _replay(run_dir, "--step", step)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == [
        f"step {step} of {run_dir}: replayed from {start} on token_exports/step_{step}/batch_rank_0.msgpack",
        "with the run's settings: loss equal, grad norm equal, weights equal (bitwise)",
    ]


@pytest.mark.slow
def test_a_changed_setting_is_reported_with_the_difference_it_makes(run_dir):
    proc = _replay(run_dir, "--step", 2, "--trainer.optim.lr", "2e-3")
    assert proc.returncode == 1, proc.stderr[-2000:]
    line = proc.stdout.splitlines()[1]
    # The lr acts in the optimizer step only: loss and grad norm stay, the weights move.
    found = re.fullmatch(
        r"with --trainer\.optim\.lr 0\.002 \(run: 0\.001\): loss equal, grad norm equal, "
        r"weights differ by at most (\S+) \((\S+\.weight)\)",
        line,
    )
    assert found, line
    assert float(found.group(1)) > 0
    # A setting that changes the loss itself is reported per quantity, with both values.
    proc = _replay(run_dir, "--step", 2, "--trainer.loss.type", "ppo")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "--trainer.loss.type ppo (run: ipo)" in proc.stdout
    assert re.search(r"^  grad norm: run \S+, replay \S+$", proc.stdout, re.M), proc.stdout


@pytest.mark.slow
def test_missing_checkpoints_are_named(run_dir, tmp_path):
    copy = tmp_path / "r"
    for part in ("configs", "token_exports", "checkpoints"):
        shutil.copytree(run_dir / part, copy / part, symlinks=True)
    shutil.rmtree(copy / "checkpoints" / "step_1")
    shutil.rmtree(copy / "checkpoints" / "step_3")
    proc = _replay(copy, "--step", 2)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"Usage error: prl replay: --step 2: no complete checkpoint of step 1 to start from "
        f"({copy / 'checkpoints' / 'step_1'}); replaying every step needs ckpt.interval = 1"
    ]
    # Without the step's own checkpoint, loss and grad norm are still compared.
    proc = _replay(copy, "--step", 3)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[1] == (
        "with the run's settings: loss equal, grad norm equal, weights not compared (no checkpoint of step 3)"
    )


def _app() -> typer.Typer:
    app = typer.Typer()
    add_commands(app)
    return app


def _fake_run(tmp_path, steps=(1,)):
    """A run directory with a resolved trainer config and (for ``steps``) exported steps."""
    resolved = tmp_path / "configs" / "latest" / "resolved"
    resolved.mkdir(parents=True)
    config = TrainerConfig.model_validate({"model": {"name": "tiny"}, "enable_token_export": True})
    (resolved / "trainer.json").write_text(config.model_dump_json())
    for step in steps:
        step_dir = tmp_path / "token_exports" / f"step_{step}"
        step_dir.mkdir(parents=True)
        (step_dir / "batch_rank_0.msgpack").write_bytes(b"")
        (step_dir / "step.json").write_text(json.dumps({"step": step, "loss": 0.5, "grad_norm": 1.0, "lr": 1e-3}))
    return tmp_path


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (lambda p: p, ["--step", "1"], "RUN_DIR: {run} has no resolved trainer config"),
        (lambda p: _fake_run(p, ()), ["--step", "1"], "RUN_DIR: {run} has no token export (token_exports/)"),
        (_fake_run, ["--step", "4"], "--step 4: no exported batch and record for step 4"),
        (_fake_run, ["--step", "0"], "--step 0: steps count from 1"),
        (_fake_run, ["--step", "2"], "--step 2: no exported batch and record for step 2"),
        (
            lambda p: _fake_run(p, (1, 2)),
            ["--step", "2"],
            "--step 2: no complete checkpoint of step 1 to start from",
        ),
        (_fake_run, ["--step", "1", "--seed", "3"], "--seed: only trainer settings can change in a replay"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, setup, args, message):
    run = setup(tmp_path)
    result = CliRunner().invoke(_app(), ["replay", str(run), *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Usage error: prl replay: "), result.stderr
    assert message.format(run=run) in lines[0]
    assert "Traceback" not in result.output


def test_the_export_keeps_the_batch_and_the_step_record_at_full_precision(tmp_path):
    exporter = TokenExporter(tmp_path, 0, 1, None)
    exporter.begin(3)
    # 1/3 and 0.1 have no exact float32: a 32-bit copy would replay a different batch
    raw = [{"input_ids": [4, 5, 6], "advantages": [0.1, 1 / 3, -2.0], "env_names": ["a"]}]
    exporter.keep_batch(raw)
    exporter.finish()
    exporter.record({"loss/all": 1 / 3, "optim/grad_norm": 0.1, "optim/lr": 1e-3, "entropy/all/mean": 5.0})
    assert read_batch(batch_path(tmp_path, 3, 0)) == raw
    record = json.loads((tmp_path / "token_exports" / "step_3" / "step.json").read_text())
    assert record == {"step": 3, "loss": 1 / 3, "grad_norm": 0.1, "lr": 1e-3}
