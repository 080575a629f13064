"""The stall watchdog in a real ``prl rl`` (docs/watchdog-doctor.md): real processes, real
SIGSTOP.

One tiny reverse-text run behind a spawned env server, with a watchdog threshold of a few
seconds. After step 2, inference, the env server and the trainer are stopped one after the
other, each for longer than the threshold: the console must get one watchdog line naming
the stopped process (and its pid), then, after SIGCONT, a "resumed" line; the metrics get
the matching ``watcher/*`` rows; and the run finishes with exit 0.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_launcher_local")
pytest.importorskip("prl_tasks_builtin")
pytest.importorskip("prl_trainer_torch")

from prl import procinfo  # noqa: E402
from prl.orchestrator.watchdog import CODES  # noqa: E402
from prl.testing.configs import tiny_rl_toml  # noqa: E402

STEPS = 40  # room after the third stall: "resumed" is said on a watchdog tick, steps later
WAIT_S = 240


def _toml(tmp_path: Path) -> Path:
    from prl_model_init.build import make_model

    model = make_model(tmp_path / "model", preset="tiny")
    # first_step_s: the threshold until the watchdog has timed a step. Steps this small can
    # all land between two of its ticks, so the first stall may come before any is timed.
    watchdog = {"factor": 2, "min_stall_s": 4, "first_step_s": 30}
    # The env server in its own process, so that it can be stopped on its own.
    isolated = {"0": {"env": {"serve": {"isolate": True}}}}
    overrides = {"max_steps": STEPS, "orchestrator": {"watchdog": watchdog, "train": {"source": isolated}}}
    return tiny_rl_toml(tmp_path, model, overrides)


class Console:
    """The launcher's stdout, line by line, kept and handed out in order."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(proc,), daemon=True).start()

    def _pump(self, proc: subprocess.Popen) -> None:
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, needle: str) -> str:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=1.0)
            except queue.Empty:
                continue
            if line is None:
                break
            if needle in line:
                return line
        tail = "\n".join(self.lines[-40:])
        pytest.fail(f"no console line with {needle!r} within {WAIT_S} s; last lines:\n{tail}")


def _stall(console: Console, pid: int, group: bool, expect: str) -> str:
    """Stop ``pid`` (its process group when ``group``), wait for the watchdog's line, resume it."""
    send = os.killpg if group else os.kill
    send(pid, signal.SIGSTOP)
    try:
        line = console.wait_for("watchdog: no step")
    finally:
        send(pid, signal.SIGCONT)
    assert expect in line and f"pid {pid}, stopped (SIGSTOP)" in line, line
    assert "last log line:" in line or expect == "env server", line
    console.wait_for("watchdog: resumed")
    return line


@pytest.mark.slow
def test_watchdog_names_each_stopped_process_and_the_run_finishes(tmp_path):
    toml = _toml(tmp_path)
    argv = [sys.executable, "-m", "prl", "rl", "@", str(toml), "--run.name", "stall"]
    err = open(tmp_path / "stderr.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
    console = Console(proc)
    try:
        console.wait_for("[trainer] Step 2 |")
        run_dir = tmp_path / "outputs" / "stall"
        pids = {k: v["pid"] for k, v in procinfo.read(run_dir / "logs" / "attempt_1").items()}
        lines = [
            _stall(console, pids["inference"], True, "waiting for inference at http://127.0.0.1:"),
            _stall(console, pids["env-server train/reverse-text"], False, "env server of source 'reverse-text'"),
            _stall(console, pids["trainer"], True, "the trainer"),
        ]
        code = proc.wait(WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        err.close()
    assert code == 0, (tmp_path / "stderr.log").read_text()[-3000:]
    assert all(line.startswith("[orchestrator] watchdog: no step for") for line in lines), lines
    rows = [json.loads(x) for x in (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    watched = [r for r in rows if "watcher/waiting_on" in r]
    assert all(r["step"] is None and r["producer"] == "orch" for r in watched)
    said = [int(r["watcher/waiting_on"]) for r in watched]
    inference, env, trainer = CODES["inference"], CODES["env_server"], CODES["trainer"]
    # Each stall: its row (code of the stopped process), then a resumed row (0).
    assert said[said.index(inference) :].count(0) >= 3 and env in said and trainer in said, said
    assert said.index(inference) < said.index(env) < said.index(trainer), said
    assert any(r.get("producer") == "trainer" and r.get("step") == STEPS for r in rows)
