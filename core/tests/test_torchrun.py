"""prl.torchrun.command: the torchrun line the trainer (one host) and SLURM (several trainer
nodes) both start, checked by running it where it matters."""

from __future__ import annotations

import subprocess
import sys

import pytest

from prl.torchrun import command


def test_one_host_is_standalone_and_keeps_rank_logs(tmp_path):
    argv = command(["-m", "mod", "cfg.json"], nproc=2, log_dir=tmp_path / "logs")
    assert argv[:4] == [sys.executable, "-m", "prl.torchrun", "--standalone"]
    assert "--nproc-per-node=2" in argv and f"--log-dir={tmp_path / 'logs'}" in argv
    assert argv[-3:] == ["-m", "mod", "cfg.json"] and "--nnodes=1" not in argv


def test_several_nodes_meet_at_the_rendezvous():
    argv = command(["-m", "prl", "trainer"], nproc=4, nodes=2, rendezvous="node0:29400", run_id="prl-77")
    assert "--standalone" not in argv and "--log-dir" not in " ".join(argv)
    for flag in ("--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d", "--rdzv-endpoint=node0:29400"):
        assert flag in argv
    assert "--rdzv-id=prl-77" in argv
    with pytest.raises(ValueError, match="rendezvous"):
        command(["x.py"], nproc=1, nodes=2)


def test_a_rank_usage_error_is_exit_2_without_a_traceback(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "rank.py"
    script.write_text("import sys\nprint('data.name: no such file', file=sys.stderr)\nsys.exit(2)\n")
    res = subprocess.run(command([str(script)], nproc=1), capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "data.name: no such file" in res.stderr and "Traceback" not in res.stderr
