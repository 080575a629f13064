"""An env server that the orchestrator spawned stops when the orchestrator is gone, even
killed outright (SIGKILL, the OOM killer): nothing else would ever stop it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("prl_tasks_builtin")

# A stand-in orchestrator: it starts one isolated source (so the server is spawned), prints
# the server's pid, and waits to be killed.
ORCHESTRATOR = textwrap.dedent(
    """
    import asyncio, sys, time
    from prl.config.components import SourceConfig
    from prl.envs.source import EnvSource

    env = {"taskset": {"id": "reverse-text"}, "serve": {"isolate": True}}
    source = EnvSource(SourceConfig.model_validate({"name": "rt", "env": env}), "train", sys.argv[1])
    asyncio.run(source.start())
    print(source.pid, flush=True)
    time.sleep(120)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")  # a zombie is dead for our purpose
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_a_spawned_env_server_stops_when_its_orchestrator_is_killed(tmp_path):
    orch = subprocess.Popen([sys.executable, "-c", ORCHESTRATOR, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        server = int(orch.stdout.readline())
        assert _alive(server)
    finally:
        orch.kill()
        orch.wait()
    deadline = time.monotonic() + 15
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = _alive(server)
    if alive:
        os.kill(server, 9)
    assert not alive, "the env server outlived its orchestrator"
    log = (tmp_path / "logs" / "latest" / "envs" / "train" / "rt.log").read_text()
    assert "is gone; stopping" in log
