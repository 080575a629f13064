"""The dashboard keeps to its own OpenAPI document (``/api/openapi.json``), answers other
methods with 405 and ``Allow``, and stops at once on SIGTERM with a request in flight."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prl_dashboard.cli import bind
from prl_monitor_file import FileMonitor

from prl.types import Branch, Trace

CONFIG = Path(__file__).with_name("schemathesis.toml")
MAX_EXAMPLES = int(os.environ.get("PRL_FUZZ_EXAMPLES", "5"))  # per operation and phase


@pytest.fixture
def outputs(tmp_path) -> Path:
    """``outputs/run-a``: metrics and two episodes, written by the file monitor."""
    run = tmp_path / "outputs" / "run-a"
    orch = FileMonitor(FileMonitor.Config(), run, "orch", "run-a")
    for step in (1, 2):
        orch.log({"reward/all/mean": 0.25 * step}, step)
        branch = Branch(token_ids=[10, 11, 12], sampled_mask=[False, True, True], logprobs=[0.0, -0.5, -0.1])
        orch.log_traces(
            [dataclasses.asdict(Trace(f"trace-{step}", "task-1", "reverse-text", [branch], reward=0.5))], step
        )
    orch.close()
    return tmp_path / "outputs"


@pytest.fixture
def server(outputs):
    srv = bind([outputs], "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_other_methods_get_405_with_allow(server):
    request = urllib.request.Request(server + "/api/runs", method="DELETE")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 405 and err.value.headers["Allow"] == "GET, HEAD"
    assert b"read-only" in err.value.read()
    head = urllib.request.urlopen(urllib.request.Request(server + "/api/runs", method="HEAD"), timeout=10)
    assert head.status == 200 and head.read() == b""


def test_schemathesis_all_checks_pass(server, tmp_path):  # a few seconds: the server is in-process
    argv = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "--no-color", "run"]
    argv += [f"{server}/api/openapi.json", "--checks", "all", "--max-examples", str(MAX_EXAMPLES)]
    t0 = time.monotonic()
    env = {**os.environ, "PRL_ST_RUN": "run-a"}
    # cwd: schemathesis keeps a cache directory (.schemathesis/) where it runs
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    print(f"\nschemathesis in {time.monotonic() - t0:.0f} s:\n{run.stdout[run.stdout.find('=== SUMMARY') :]}")
    failures = run.stdout[run.stdout.find("=== FAILURES") :] if "=== FAILURES" in run.stdout else run.stdout
    assert run.returncode == 0, failures[:20000] + run.stderr[-2000:]


@pytest.mark.slow
def test_sigterm_stops_it_with_a_request_in_flight(outputs):
    proc = subprocess.Popen(
        [sys.executable, "-m", "prl", "dashboard", str(outputs), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        port = int(line.split("http://", 1)[1].split(" ", 1)[0].rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(b"GET /api/runs HTTP/1.1\r\nHost: x\r\n")  # headers never finished
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            pytest.fail("the dashboard was still running 5 s after SIGTERM")
