"""The stall watchdog's decisions on real signals: handshake markers on disk, a real
stopped process, a server that accepts connections but never answers. The orchestrator is
a stand-in holding the attributes the watchdog reads; time is passed in explicitly."""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import time
from types import SimpleNamespace

import pytest

from prl import handshake, procinfo
from prl.config.watchdog import WatchdogConfig
from prl.orchestrator import watchdog as wd


class Rows:
    def __init__(self):
        self.rows = []

    def log(self, metrics, step):
        self.rows.append((step, dict(metrics)))


@pytest.fixture(autouse=True)
def _no_attempt(monkeypatch):
    """No process list unless a test makes one: an in-process CLI test of the same worker
    may have left PRL_ATTEMPT_LOG_DIR pointing at its own run's list."""
    monkeypatch.delenv("PRL_ATTEMPT_LOG_DIR", raising=False)


def _orch(tmp_path, url=None):
    return SimpleNamespace(
        run_dir=tmp_path, monitors=[Rows()], follower=SimpleNamespace(version=0), step=1,
        client=SimpleNamespace(base_url=url), inflight_episodes=0, inflight_by_source={},
        mixer=SimpleNamespace(sources=[]), buffer=SimpleNamespace(filtered_traces=0, count=0),
        config=SimpleNamespace(batch_size=8), last_arrival=None,
    )  # fmt: skip


def _publish(tmp_path, version, *markers):
    step = tmp_path / "broadcasts" / f"step_{version}"
    step.mkdir(parents=True, exist_ok=True)
    for marker in (handshake.SENDER, *markers):
        handshake.touch(step / marker)


@pytest.fixture
def stopped(tmp_path, monkeypatch):
    """A real process in state T, listed as the trainer with a log of its own."""
    proc = subprocess.Popen(["sleep", "60"])
    proc.send_signal(signal.SIGSTOP)
    # The kernel marks the process T only once it runs to take the signal; a loaded machine
    # can leave it "running" for a while, so wait for the state the tests are about.
    deadline = time.monotonic() + 30
    while procinfo.state(proc.pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    log_file = tmp_path / "trainer.log"
    log_file.write_text("step 3 loss 0.1\n\n")
    monkeypatch.setenv("PRL_ATTEMPT_LOG_DIR", str(tmp_path))
    procinfo.record(tmp_path, "trainer", proc.pid, log_file)
    yield proc
    proc.kill()
    proc.wait()


def _steps(dog, orch, tmp_path, times):
    """Versions 0, 1, ... published and loaded at ``times``; the batch shipped ahead of them."""
    for version, now in enumerate(times):
        _publish(tmp_path, version, handshake.RECEIVER, handshake.FINISHED)
        orch.follower.version, orch.step = version, version + 3
        dog.tick(now)


def test_a_stopped_trainer_is_named_once_then_resumed(tmp_path, stopped, caplog):
    orch = _orch(tmp_path)
    dog = wd.StallWatchdog(orch, WatchdogConfig(factor=3, min_stall_s=2, first_step_s=100))
    assert dog.threshold() == 100  # no step time known yet
    _steps(dog, orch, tmp_path, [0.0, 10.0, 11.0, 12.0, 13.0])
    assert dog.threshold() == 3  # 3 x median 1 s, above the 2 s floor
    with caplog.at_level(logging.WARNING, logger="prl.orchestrator"):
        assert dog.tick(15.9) is None  # 2.9 s: not yet
        verdict = dog.tick(16.5)
        assert dog.tick(17.5) is verdict or dog.tick(17.5).what == verdict.what
    assert verdict.kind == "trainer" and verdict.pid == stopped.pid
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines  # said once, not every tick
    assert lines[0].startswith("watchdog: no step for 4 s (threshold 3 s = max(2 s, 3 x median step 1.0 s))")
    assert f"waiting for the trainer on batch 5 (pid {stopped.pid}, stopped (SIGSTOP); batches up to 6" in lines[0]
    assert lines[0].endswith("last log line: 'step 3 loss 0.1'")
    row = {"watcher/stalled_s": pytest.approx(3.5), "watcher/waiting_on": 3.0, "watcher/threshold_s": 3.0}
    assert orch.monitors[0].rows == [(None, {**row, "watcher/pid": float(stopped.pid)})]
    caplog.clear()
    _publish(tmp_path, 5)
    with caplog.at_level(logging.WARNING, logger="prl.orchestrator"):
        assert dog.tick(20.0) is None
    assert [r.getMessage() for r in caplog.records] == [
        "watchdog: resumed after 7 s stalled (was waiting for the trainer on batch 5)"
    ]
    assert orch.monitors[0].rows[-1] == (None, {"watcher/stalled_s": pytest.approx(7.0), "watcher/waiting_on": 0.0})
    assert dog.threshold() == 3  # the step that spanned the stall is not a step time


def test_a_handshake_stopped_before_finished_names_the_trainer(tmp_path, stopped):
    orch = _orch(tmp_path)
    _publish(tmp_path, 0, handshake.RECEIVER, handshake.FINISHED)
    _publish(tmp_path, 1, handshake.RECEIVER)
    verdict = wd.StallWatchdog(orch, WatchdogConfig()).diagnose(0.0)
    assert verdict.kind == "trainer"
    assert verdict.what.startswith("the trainer handing over weights version 1 (pid ")
    assert "broadcasts/step_1 stopped before .finished" in verdict.what


def test_inference_that_accepts_but_never_answers_is_named_with_its_url(tmp_path, monkeypatch):
    monkeypatch.setattr(wd, "PROBE_S", 0.3)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel completes connections; nobody ever reads them
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        orch = _orch(tmp_path, url)
        orch.inflight_episodes = 4
        verdict = wd.StallWatchdog(orch, WatchdogConfig()).diagnose(0.0)
    assert verdict.kind == "inference"
    assert verdict.what == f"inference at {url} (pid unknown; /health: no answer in 0.3 s; 4 episodes in flight)"


def test_an_env_server_that_does_not_answer_is_named_by_source(tmp_path, monkeypatch):
    from prl.envs.protocol import ProtocolClient

    monkeypatch.setattr(wd, "PROBE_S", 0.3)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        env = SimpleNamespace(address=address, pid=None, log_path=None, _remote=ProtocolClient(address))
        orch = _orch(tmp_path)
        orch.inflight_episodes, orch.inflight_by_source = 2, {"poker": 2}
        orch.mixer.sources = [SimpleNamespace(name="poker", env=env)]
        verdict = wd.StallWatchdog(orch, WatchdogConfig()).diagnose(0.0)
    assert verdict.kind == "env_server"
    assert verdict.what == (
        f"env server of source 'poker' at {address} (pid unknown; health: no answer in 0.3 s; 2 episodes in flight)"
    )


def test_nothing_in_flight_and_nothing_shipped_ahead_is_the_orchestrator_collecting(tmp_path):
    orch = _orch(tmp_path)
    _publish(tmp_path, 0, handshake.RECEIVER, handshake.FINISHED)
    orch.buffer.count, orch.buffer.filtered_traces = 0, 16
    verdict = wd.StallWatchdog(orch, WatchdogConfig()).diagnose(0.0)
    assert verdict.kind == "orchestrator"
    assert "the orchestrator collecting batch 1" in verdict.what
    assert "16 finished traces were filtered out" in verdict.what
