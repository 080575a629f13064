"""``prl sft --slurm`` and ``prl rl --slurm`` through a real SLURM (the 3-node cluster of
conftest.py, all on this machine): sbatch, the job's nodes, logs, metrics, checkpoints,
failures named by node and component, Ctrl-C cancelling the job, multi-node scripts that
sbatch accepts, and an RL job whose trainer spans two nodes (torchrun, gloo)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_tasks_builtin")
pytest.importorskip("prl_trainer_torch")

from prl.serving import free_port  # noqa: E402
from prl.testing.configs import tiny_rl_toml  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A tiny model and reverse-text SFT data, shared by the tests of this module."""
    from prl_model_init.build import make_model

    root = tmp_path_factory.mktemp("work")
    make_model(root / "model", preset="tiny")
    rows = [{"prompt": f"reverse: abc{i}", "completion": f"{i}cba"} for i in range(40)]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def _prl(args: list[str], cwd: Path, env: dict, timeout: float = 480) -> subprocess.CompletedProcess:
    # Each job meets its trainer ranks on a fresh port: on the fixed default the previous job's
    # torchrun store, still winding down on a loaded machine, answered the next job's agent
    # and then went away (RendezvousConnectionError, seen with two pytest workers).
    args = [*args, "--deployment.rdzv_port", str(free_port("127.0.0.1"))]
    return subprocess.run(
        [sys.executable, "-m", "prl", *args],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _sft_args(workdir: Path, name: str, steps: int = 3) -> list[str]:
    return [
        "sft",
        "--model.name",
        str(workdir / "model"),
        "--renderer.name",
        "qwen3",
        "--data.name",
        str(workdir / "train.jsonl"),
        "--data.batch-size",
        "2",
        "--data.seq-len",
        "64",
        "--max-steps",
        str(steps),
        "--output-dir",
        str(workdir / "out"),
        "--run.name",
        name,
        "--slurm",
    ]


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]


def test_prl_sft_runs_to_the_end_as_a_slurm_job(workdir, slurm_env):
    proc = _prl([*_sft_args(workdir, "sft"), "--ckpt"], workdir, slurm_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = workdir / "out" / "sft"
    job_id = (run / "launcher" / "job_id").read_text().strip()
    assert f"submitted SLURM job {job_id}" in proc.stdout and f"SLURM job {job_id} completed" in proc.stdout
    assert "[trainer] Step 3 |" in proc.stdout
    assert "Step 3 |" in (run / "logs" / "attempt_1" / "trainer.log").read_text()
    assert "[trainer] Step 3 |" in (run / "launcher" / "logs" / f"job_{job_id}.log").read_text()
    assert sorted(r["step"] for r in _rows(run) if r.get("producer") == "trainer" and "loss/mean" in r) == [1, 2, 3]
    assert (run / "checkpoints" / "step_3" / "trainer" / ".metadata").exists()
    state = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, env={**os.environ, **slurm_env}
    ).stdout
    assert "JobState=COMPLETED" in state

    # --resume submits a new job for a new attempt, which continues from step 3.
    args = _sft_args(workdir, "sft")
    args[args.index("--max-steps") + 1] = "5"
    again = _prl([*args, "--ckpt", "--resume"], workdir, slurm_env)
    assert again.returncode == 0, again.stderr[-3000:]
    jobs = (run / "launcher" / "jobs.tsv").read_text().splitlines()
    assert [line.split("\t")[1] for line in jobs] == ["attempt_1", "attempt_2"]
    assert "[trainer] Step 5 |" in again.stdout and "[trainer] Step 1 |" not in again.stdout
    assert (run / "checkpoints" / "step_5" / "trainer" / ".metadata").exists()


def _rl_toml(workdir: Path, *extra: dict) -> Path:
    """The tiny run on the module's model, outputs under ``workdir/out``, with ``extra`` merged in."""
    return tiny_rl_toml(workdir, workdir / "model", {"output_dir": str(workdir / "out"), "ckpt": {}}, *extra)


def _check_rl_run(run: Path) -> None:
    rows = _rows(run)
    assert [r["step"] for r in rows if r.get("producer") == "orch" and r.get("step")] == [1, 2]
    assert sorted(r["step"] for r in rows if r.get("producer") == "trainer" and "loss/all" in r) == [1, 2]
    final = run / "checkpoints" / "step_2"
    assert (final / "trainer" / "COMPLETE").exists() and (final / "orchestrator" / "COMPLETE").exists()


def test_prl_rl_runs_to_the_end_as_a_single_node_slurm_job(workdir, slurm_env):
    proc = _prl(["rl", "@", str(_rl_toml(workdir)), "--run.name", "rl", "--slurm"], workdir, slurm_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[orchestrator] Step 2 |" in proc.stdout and "[trainer] Step 2 |" in proc.stdout
    run = workdir / "out" / "rl"
    logs = run / "logs" / "attempt_1"
    assert all((logs / f"{c}.log").stat().st_size > 0 for c in ("inference", "orchestrator", "trainer"))
    assert (run / "configs" / "attempt_1" / "resolved" / "rl.json").exists()
    _check_rl_run(run)


def _workers(n: int) -> list[str]:
    return ["--trainer.num-workers", str(n), "--orchestrator.num-train-workers", str(n)]


def test_prl_rl_trainer_spans_two_nodes(workdir, slurm_env):
    """1 inference node + 2 trainer nodes (one gloo rank each, c10d rendezvous), one host."""
    extra = {"deployment": {"type": "multi_node", "num_infer_nodes": 1, "num_train_nodes": 2}}
    proc = _prl(["rl", "@", str(_rl_toml(workdir, extra)), "--run.name", "rl-multi", *_workers(2)], workdir, slurm_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = workdir / "out" / "rl-multi"
    logs = run / "logs" / "attempt_1"
    assert os.readlink(logs / "trainer.log") == "trainer/node_0.log"
    assert os.readlink(logs / "inference.log") == "inference/node_0.log"
    # Each trainer node ran one rank of the same torchrun job.
    for k in (0, 1):
        assert "[default0]:" in (logs / "trainer" / f"node_{k}.log").read_text()
        assert list((logs / "trainer" / "torchrun" / f"node_{k}").glob("*/attempt_0/0/stdout.log"))
    _check_rl_run(run)


def test_prl_rl_two_inference_nodes_behind_the_router(workdir, slurm_env):
    """2 inference nodes (one torch engine each) behind the router on the first, 1 trainer node."""
    import socket

    with socket.socket() as s:  # two free ports in a row for backend_port + 0, + 1
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    extra = {"deployment": {"type": "multi_node", "num_infer_nodes": 2, "num_train_nodes": 1}}
    args = ["rl", "@", str(_rl_toml(workdir, extra)), "--run.name", "rl-2inf", "--inference.server.backend-port"]
    proc = _prl([*args, str(port)], workdir, {**slurm_env, "PRL_API_KEY": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = workdir / "out" / "rl-2inf"
    logs = run / "logs" / "attempt_1"
    router = (logs / "inference" / "router.log").read_text()
    assert "router: /update_weights: engine versions [2, 2]" in router
    routed = re.search(r"requests routed per engine \[(\d+), (\d+)\]", router)
    assert routed and min(int(n) for n in routed.groups()) > 0, router[-2000:]
    for k in (0, 1):
        assert f"listening on http://0.0.0.0:{port + k}" in (logs / "inference" / f"node_{k}.log").read_text()
    _check_rl_run(run)


def test_three_node_scripts_are_accepted_by_sbatch_test_only(workdir, slurm_env):
    extra = {
        "deployment": {"type": "multi_node", "num_infer_nodes": 1, "num_train_nodes": 2},
        "slurm": {"time": "01:00:00", "extra_directives": ["--exclusive"]},
    }
    toml = _rl_toml(workdir, extra)
    proc = _prl(["rl", "@", str(toml), "--run.name", "rl-3", "--dry-run", *_workers(4)], workdir, slurm_env)
    assert proc.returncode == 0, proc.stderr
    script = workdir / "out" / "rl-3" / "launcher" / "rl.sbatch"
    test = subprocess.run(
        ["sbatch", "--test-only", str(script)], capture_output=True, text=True, env={**os.environ, **slurm_env}
    )
    assert test.returncode == 0 and "to start at" in test.stderr, test.stderr
    # Four nodes do not exist in this cluster: sbatch says so, so the check above can fail.
    four = subprocess.run(
        ["sbatch", "--test-only", "--nodes=4", str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, **slurm_env},
    )
    assert four.returncode != 0


def test_a_failing_component_names_the_node_and_ends_the_job(workdir, slurm_env):
    bad = workdir / "bad.jsonl"
    rows = [{"prompt": f"p{i}", "completion": f"c{i}"} for i in range(8)]
    rows[5] = {"prompt": "x", "completion": 5}
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = _sft_args(workdir, "sft-bad")
    args[args.index(str(workdir / "train.jsonl"))] = str(bad)
    proc = _prl([*args, "--data.shuffle", "false"], workdir, slurm_env)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "prl: node 0 (n0): trainer: Data error: row 5" in proc.stderr
    assert "ended FAILED (exit code 2)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_ctrl_c_cancels_the_job_and_detach_returns_at_once(workdir, slurm_env):
    env = {**os.environ, **slurm_env}
    cmd = [sys.executable, "-m", "prl", *_sft_args(workdir, "sft-long", steps=100000)]
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job_file = workdir / "out" / "sft-long" / "launcher" / "job_id"
    deadline = time.monotonic() + 120
    while not job_file.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    job_id = job_file.read_text().strip()
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert f"cancelling SLURM job {job_id} (scancel)" in err
    state = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, env=env).stdout
    assert "JobState=CANCELLED" in state

    started = time.monotonic()
    detached = _prl([*_sft_args(workdir, "sft-detach", steps=100000), "--slurm.detach"], workdir, slurm_env)
    assert detached.returncode == 0, detached.stderr
    assert time.monotonic() - started < 60 and "detached" in detached.stdout
    job_id = (workdir / "out" / "sft-detach" / "launcher" / "job_id").read_text().strip()
    assert (
        "JobState="
        in subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, env=env).stdout
    )
    subprocess.run(["scancel", job_id], env=env, check=True)


def test_prl_sft_trainer_spans_two_nodes(workdir, slurm_env):
    args = [
        *_sft_args(workdir, "sft-multi"),
        "--ckpt",
        "--num-workers",
        "2",
        "--deployment.type",
        "multi_node",
        "--deployment.num-train-nodes",
        "2",
    ]
    proc = _prl(args, workdir, slurm_env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(2 node(s))" in proc.stdout
    run = workdir / "out" / "sft-multi"
    logs = run / "logs" / "attempt_1"
    assert os.readlink(logs / "trainer.log") == "trainer/node_0.log"
    for k in (0, 1):
        assert "[default0]:" in (logs / "trainer" / f"node_{k}.log").read_text()
    # One DCP shard per rank: the two nodes trained as one world of two.
    shards = sorted(p.name for p in (run / "checkpoints" / "step_3" / "trainer").glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"]
