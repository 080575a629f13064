"""core's servers stop within a few seconds of SIGTERM whatever is in flight: the router with
a request its engine never answers, the env server with a client that never finishes its
request line. A launcher (or SLURM) stopping a run must not wait on either."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from prl.serving import free_port

pytestmark = pytest.mark.slow
STOP_S = 5.0  # SIGTERM to exit


class _Engine(BaseHTTPRequestHandler):
    """Healthy, but never answers a generation: the router's request stays in flight."""

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        body = json.dumps({"status": "ok", "version": 0, "paused": False}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        time.sleep(60)

    def log_message(self, *args) -> None:
        pass


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text().strip():
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else "exited"
        assert time.monotonic() < deadline, f"no {path.name} within {timeout} s"
        time.sleep(0.1)
    return path.read_text().strip()


def _stop(proc: subprocess.Popen, what: str) -> float:
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the {what} was still running {STOP_S} s after SIGTERM")
    return time.monotonic() - t0


def test_the_router_stops_with_a_request_in_flight(tmp_path):
    engine = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    engine.daemon_threads = True
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    ready = tmp_path / "ready"
    cfg = {"server": {"port": free_port("127.0.0.1"), "ready_file": str(ready)}}
    (tmp_path / "inference.json").write_text(json.dumps(cfg))
    argv = [
        sys.executable,
        "-m",
        "prl.engines",
        str(tmp_path / "inference.json"),
        f"http://127.0.0.1:{engine.server_port}",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = _wait_for(ready, proc)
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            body = b'{"prompt": "hi", "max_tokens": 4}'
            head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
            conn.sendall(head.encode() + b"content-type: application/json\r\n\r\n" + body)
            time.sleep(0.5)  # the router has forwarded it; the engine holds it
            print(f"\nrouter exited {_stop(proc, 'router'):.1f} s after SIGTERM")
    finally:
        if proc.poll() is None:
            proc.kill()
        engine.shutdown()
        engine.server_close()


def test_the_env_server_stops_with_a_call_in_flight(tmp_path):
    pytest.importorskip("prl_tasks_builtin")
    config = tmp_path / "rt.json"
    config.write_text(json.dumps({"name": "rt", "env": {"taskset": {"id": "reverse-text"}}}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "prl.envs.server", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        host, port = _wait_for(config.with_suffix(".address"), proc).rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(b'{"method": "health"')  # the request line is never finished
            time.sleep(0.5)
            print(f"\nenv server exited {_stop(proc, 'env server'):.1f} s after SIGTERM")
        assert not config.with_suffix(".address").exists()  # it cleaned up after itself
    finally:
        if proc.poll() is None:
            proc.kill()
