"""Crash safety of ``prl rl`` (docs/checkpoints.md, "Crash safety"): real processes, real
``kill -9``.

One uninterrupted deterministic reference run, then one run that loses each of its
processes in turn (trainer, orchestrator, inference, env server) to SIGKILL at a seeded
random step and is continued with ``--resume`` each time. At the end no step is lost or
done twice, the merged metrics hold one row per producer and step, and the reward and loss
curves equal the reference's.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_launcher_local")
pytest.importorskip("prl_tasks_builtin")
pytest.importorskip("prl_trainer_torch")
from prl_monitor_file import metric_by_step, read_metrics  # noqa: E402

from prl import layout  # noqa: E402
from prl.serving import free_port  # noqa: E402
from prl.testing.configs import tiny_rl_toml  # noqa: E402

STEPS = 6
LAUNCH_TIMEOUT_S = 300
# Each process of a run, by the resolved config its command line names.
TARGETS = {
    "trainer": "resolved/trainer.json",
    "orchestrator": "resolved/orchestrator.json",
    "inference": "resolved/inference.json",
    "env-server": "resolved/envs/train/reverse-text.json",
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from prl_model_init.build import make_model

    return make_model(tmp_path_factory.mktemp("model") / "tiny", preset="tiny")


def _toml(tmp_path: Path, model: Path) -> Path:
    """A deterministic reverse-text run behind a spawned env server, saving every 2 steps."""
    isolated = {"0": {"env": {"serve": {"isolate": True}}}}
    overrides = {"max_steps": STEPS, "orchestrator": {"deterministic": True, "train": {"source": isolated}}}
    port = {"inference": {"server": {"port": free_port("127.0.0.1")}}, "ckpt": {"interval": 2}}
    return tiny_rl_toml(tmp_path, model, overrides, port)


def _launch(toml: Path, name: str, *extra: str) -> subprocess.Popen:
    log = open(toml.parent / f"{name}.launch.log", "ab")  # noqa: SIM115 - closed by the process's exit
    argv = [sys.executable, "-m", "prl", "rl", "@", str(toml), "--run.name", name, *extra]
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _wait(proc: subprocess.Popen, toml: Path, name: str) -> int:
    try:
        return proc.wait(LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"prl rl did not finish:\n{(toml.parent / f'{name}.launch.log').read_text()[-3000:]}")


def _pid_of(run_dir: Path, attempt: int, target: str) -> int | None:
    """The process whose command line names this attempt's resolved config of ``target``."""
    needle = f"{run_dir}/configs/attempt_{attempt}/{TARGETS[target]}"
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle.encode() in argv:
            return int(entry)
    return None


def _raw_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "monitors" / "file" / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _trainer_row_seen(run_dir: Path, attempt: int, step: int) -> bool:
    return any(
        r.get("producer") == "trainer" and r.get("step") == step and r.get("attempt", 1) == attempt
        for r in _raw_rows(run_dir)
    )


def _kill_at(proc: subprocess.Popen, run_dir: Path, attempt: int, step: int, target: str) -> None:
    """SIGKILL ``target`` once the trainer logged ``step`` in this attempt."""
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    while not _trainer_row_seen(run_dir, attempt, step):
        assert proc.poll() is None, f"the run ended before step {step} (exit {proc.returncode})"
        assert time.monotonic() < deadline, f"step {step} never came"
        time.sleep(0.05)
    pid = _pid_of(run_dir, attempt, target)
    assert pid is not None, f"no {target} process in attempt {attempt}"
    os.kill(pid, signal.SIGKILL)


def _curves(run_dir: Path) -> tuple[list[dict], dict[int, float], dict[int, float]]:
    rows = read_metrics(run_dir / "monitors" / "file" / "metrics.jsonl")
    return rows, metric_by_step(rows, "orch", "reward/all/mean"), metric_by_step(rows, "trainer", "loss/all")


@pytest.mark.slow
def test_kill_9_of_each_process_then_resume_equals_an_uninterrupted_run(tmp_path, model):
    toml = _toml(tmp_path, model)
    assert _wait(_launch(toml, "ref"), toml, "ref") == 0
    _, ref_reward, ref_loss = _curves(tmp_path / "outputs" / "ref")
    assert sorted(ref_reward) == sorted(ref_loss) == list(range(1, STEPS + 1))

    run_dir, root = tmp_path / "outputs" / "crash", tmp_path / "outputs" / "crash" / "checkpoints"
    rng = random.Random(20251201)
    starts = []  # (attempt, step it resumed from)
    for attempt, target in enumerate(TARGETS, start=1):
        resumed_from = layout.latest_complete(root, layout.COMPONENTS["rl"]) or 0
        starts.append((attempt, resumed_from))
        step = rng.randint(max(resumed_from + 1, 3), STEPS - 1)  # after the first checkpoint (step 2)
        proc = _launch(toml, "crash", *(["--resume"] if attempt > 1 else []))
        _kill_at(proc, run_dir, attempt, step, target)
        assert _wait(proc, toml, "crash") != 0  # the launcher tears the whole run down
    final = layout.latest_complete(root, layout.COMPONENTS["rl"])
    starts.append((len(TARGETS) + 1, final))
    assert _wait(_launch(toml, "crash", "--resume"), toml, "crash") == 0

    rows, reward, loss = _curves(run_dir)
    # One row per producer and step in the merged view; every step is there.
    keyed = [(r["producer"], r["step"]) for r in rows if r["step"] is not None]
    assert len(keyed) == len(set(keyed))
    assert sorted(reward) == sorted(loss) == list(range(1, STEPS + 1))
    # Each attempt's trainer began right after the checkpoint it resumed from: no step
    # skipped, none before the checkpoint trained again.
    raw = _raw_rows(run_dir)
    for attempt, resumed_from in starts:
        steps = sorted({r["step"] for r in raw if r["producer"] == "trainer" and r.get("attempt", 1) == attempt})
        assert steps == list(range(resumed_from + 1, steps[-1] + 1)), (attempt, resumed_from, steps)
    assert layout.is_complete(layout.step_dir(root, STEPS), layout.COMPONENTS["rl"])
    # Deterministic mode: the resumed curves are the uninterrupted run's.
    assert reward == pytest.approx(ref_reward, rel=1e-4, abs=1e-6)
    assert loss == pytest.approx(ref_loss, rel=1e-4, abs=1e-6)
