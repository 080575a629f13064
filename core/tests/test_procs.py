"""prl.procs.stop_processes: SIGTERM first, SIGKILL only for what outlives the grace period."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from prl.procs import stop_processes

# Prints once its SIGTERM handling is in place, then sleeps.
CHILD = "import signal, sys, time\n{setup}\nprint('up', flush=True)\ntime.sleep(60)\n"


def _start(setup: str = "") -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(setup=setup)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "up\n"
    return proc


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period_and_the_others_are_not():
    polite = _start()
    stubborn = _start("signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    done = _start()
    done.terminate()
    done.wait(5)  # already gone: stopping it again is harmless
    killed = []
    started = time.monotonic()
    stop_processes([polite, stubborn, done], grace=1.0, on_kill=killed.append)
    took = time.monotonic() - started
    assert killed == [stubborn]
    assert polite.returncode == -signal.SIGTERM and stubborn.returncode == -signal.SIGKILL
    assert 1.0 <= took < 5.0, took


def test_processes_that_stop_on_sigterm_do_not_wait_out_the_grace_period():
    procs = [_start(), _start()]
    started = time.monotonic()
    stop_processes(procs, grace=30.0)
    assert time.monotonic() - started < 5.0
    assert [p.returncode for p in procs] == [-signal.SIGTERM, -signal.SIGTERM]
