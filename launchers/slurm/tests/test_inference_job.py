"""``prl inference --slurm`` through a real SLURM (the cluster of conftest.py): the server
runs as a job of its own, the command prints where clients reach it, a client gets a
completion there, admin routes need the job's API key, and Ctrl-C cancels the job."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")

pytestmark = pytest.mark.slow

UP = re.compile(r"inference server of SLURM job (\d+) is up at (http://\S+) \(node (\S+)\)")


def _lines(stream) -> queue.Queue:
    """The stream's lines as they come (the command runs until it is interrupted)."""
    out: queue.Queue = queue.Queue()

    def pump():
        for line in stream:
            out.put(line)
        out.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return out


def _wait_for(lines: queue.Queue, pattern: re.Pattern, timeout: float, log: Path) -> tuple[re.Match, list[str]]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
        m = pattern.search(line)
        if m:
            return m, seen
    server = log.read_text()[-3000:] if log.exists() else "(no log)"
    raise AssertionError(f"the server was never announced; output:\n{''.join(seen)}\nserver log:\n{server}")


def _post(url: str, body: dict, key: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _slurm(args: list[str], env: dict) -> str:
    return subprocess.run(args, capture_output=True, text=True, env=env).stdout


def test_prl_inference_serves_as_a_slurm_job_until_ctrl_c(tmp_path, slurm_env):
    from prl_model_init.build import make_model

    make_model(tmp_path / "model", preset="tiny")
    model, out = str(tmp_path / "model"), tmp_path / "out"
    env = {**os.environ, **slurm_env, "OMP_NUM_THREADS": "1", "PRL_API_KEY": ""}
    cmd = [sys.executable, "-m", "prl", "inference", "--model.name", model, "--backend.type", "torch"]
    cmd += ["--server.port", "0", "--output-dir", str(out), "--run.name", "serve", "--slurm"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Generous: the cores of a shared CI machine may be busy with other work.
        log = out / "serve" / "logs" / "attempt_1" / "inference.log"
        m, seen = _wait_for(_lines(proc.stdout), UP, timeout=600, log=log)
        job_id, url, node = m.groups()
        run = out / "serve"
        assert (run / "launcher" / "job_id").read_text().strip() == job_id
        assert f"submitted SLURM job {job_id}" in "".join(seen)
        assert (run / "launcher" / "server_url").read_text().strip() == url
        # The node's address (NodeAddr) and the port the server bound on it.
        assert node in {"n0", "n1", "n2"} and url.startswith("http://127.0.0.1:") and not url.endswith(":0")

        with urllib.request.urlopen(url + "/health", timeout=30) as resp:
            assert resp.status == 200
        status, body = _post(url + "/v1/completions", {"model": model, "prompt": "reverse: abc", "max_tokens": 4})
        assert status == 200, body
        assert body["usage"]["completion_tokens"] == 4 and isinstance(body["choices"][0]["text"], str)

        # Bound beyond loopback, the admin routes take the key made for this job only.
        key_file = run / "launcher" / "api_key"
        assert key_file.stat().st_mode & 0o777 == 0o600
        assert _post(url + "/pause", {})[0] == 401
        assert _post(url + "/resume", {}, key_file.read_text().strip())[0] == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)  # stdout is the pump thread's; stderr says little
        err = proc.stderr.read()
    assert proc.returncode == 130, err
    assert f"cancelling SLURM job {job_id} (scancel)" in err
    assert _slurm(["squeue", "-h", "-j", job_id], env).strip() == ""
    assert "JobState=CANCELLED" in _slurm(["scontrol", "show", "job", "-o", job_id], env)
