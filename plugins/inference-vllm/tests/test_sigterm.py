"""The vLLM backend bounds the weight-broadcast wait (504 after ``server.admin_timeout``) and
stops within seconds of SIGTERM while an ``/update_weights`` waits for a trainer that never
comes (a trainer that crashed before its first send). Its own server: SIGTERM ends it."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import httpx
import pytest

from prl.serving import free_port

pytestmark = pytest.mark.vllm
pytest.importorskip("prl_weights_nccl")

ADMIN_TIMEOUT = 8.0
STOP_S = 30.0  # vLLM's engine core and workers stop too


def test_broadcast_wait_times_out_and_sigterm_stops_it_mid_wait(tiny_model, tmp_path, server_process):
    pytest.importorskip("vllm")
    start_server, api_key = server_process
    proc, url, _, log_path = start_server(tmp_path, tiny_model, server={"admin_timeout": ADMIN_TIMEOUT})
    auth = {"Authorization": f"Bearer {api_key}"}
    answers: list = []
    try:
        with httpx.Client(base_url=url, timeout=120, headers=auth) as http:
            join = {"host": "127.0.0.1", "port": free_port("127.0.0.1"), "rank_offset": 1, "inference_world_size": 1}
            assert http.post("/init_broadcaster", json=join).status_code == 200
            t0 = time.monotonic()
            resp = http.post("/update_weights", json={"weight_dir": None})
            assert resp.status_code == 504, resp.text
            assert "server.admin_timeout" in resp.json()["error"]["message"]
            assert ADMIN_TIMEOUT <= time.monotonic() - t0 < ADMIN_TIMEOUT + 10
            assert http.get("/health").status_code == 200  # the engine was not blocked meanwhile

            def update() -> None:
                try:
                    answers.append(http.post("/update_weights", json={"weight_dir": None}))
                except httpx.HTTPError as exc:
                    answers.append(exc)

            waiter = threading.Thread(target=update)
            waiter.start()
            time.sleep(1.0)
            assert not answers
            proc.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            try:
                proc.wait(timeout=STOP_S)
                print(f"\nvLLM exited {time.monotonic() - t0:.1f} s after SIGTERM")
            except subprocess.TimeoutExpired:
                pytest.fail(f"vLLM was still running {STOP_S} s after SIGTERM:\n{log_path.read_text()[-3000:]}")
            waiter.join(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
