"""What a user sees of a short ``prl sft`` run on a tiny model: where the logs are before the
first step, a loss on every step line, and at the end a summary with the run directory,
the loss first -> last, and an export command whose checkpoint exists."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_trainer_torch")
pytest.importorskip("prl_tasks_builtin")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, reverse_text_sft):
    from prl_model_init.build import make_model

    base = tmp_path_factory.mktemp("sft-summary")
    return make_model(base / "model", preset="tiny"), reverse_text_sft(base / "train.jsonl", 64)


def _sft(tmp_path, tiny, *flags: str) -> subprocess.CompletedProcess:
    model, data = tiny
    argv = ["sft", "--model.name", str(model), "--data.name", str(data), "--data.seq-len", "128"]
    argv += ["--data.batch-size", "4", "--max-steps", "3", "--output-dir", str(tmp_path / "out"), "--run.name", "s"]
    cmd = [sys.executable, "-m", "prl", *argv, *flags]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)


@pytest.mark.slow
def test_a_short_sft_run_says_where_its_logs_are_and_sums_up_at_the_end(tmp_path, tiny):
    result = _sft(tmp_path, tiny, "--ckpt.interval", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    run = tmp_path / "out" / "s"
    logs = run / "logs" / "attempt_1"
    assert lines[:2] == [f"Run directory: {run}", f"Starting trainer ... (logs: {logs}: trainer.log)"]
    steps = [line for line in lines if line.startswith("Step ")]
    assert len(steps) == 3 and all(re.search(r"\| Loss \d+\.\d{4}", line) for line in steps), steps
    end = lines[next(i for i, line in enumerate(lines) if line.startswith("Run finished in ")) :]
    assert re.fullmatch(rf"Run finished in \d+s: {re.escape(str(run))}", end[0]), end
    losses = [json.loads(r)["loss/mean"] for r in (run / "monitors/file/metrics.jsonl").read_text().splitlines()[:3]]
    assert end[1] == f"  loss:            {losses[0]:.4f} → {losses[2]:.4f} (step 1 → 3)"
    export = next(line for line in end if line.startswith("  prl export "))
    ckpt = Path(export.split()[2])
    assert ckpt == run / "checkpoints" / "step_3" and (ckpt / "trainer" / "COMPLETE").exists()
    assert f"  prl dashboard {tmp_path / 'out'}" in end
