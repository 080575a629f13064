"""``--slurm --dry-run`` renders the job into ``<run>/launcher/`` and submits nothing; bad
input (no sbatch, node counts that do not add up, a template that does not render) is one
line and exit 2. A fake ``sbatch`` on PATH stands in for the SLURM client: the dry run only
checks it is there, and the test fails if anything calls it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("prl_launcher_local")
pytest.importorskip("prl_trainer_torch")


@pytest.fixture
def fake_sbatch(tmp_path):
    """A PATH whose ``sbatch`` records that it was called (a dry run must never call it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "sbatch-called"
    script = bin_dir / "sbatch"
    script.write_text(f"#!/bin/sh\ntouch {marker}\necho 99\n")
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "marker": marker}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A model directory as far as a dry run looks: a config and the renderer to use."""
    model = tmp_path_factory.mktemp("m") / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}))
    (model / "tokenizer_config.json").write_text(json.dumps({"prl_renderer": "qwen3"}))
    return model


def _rl_toml(tmp_path, model, extra: str = "") -> Path:
    toml = tmp_path / "rl.toml"
    body = f'''
        max_steps = 2
        output_dir = "{tmp_path / "out"}"
        [run]
        name = "job"
        [model]
        name = "{model}"
        [[orchestrator.train.source]]
        name = "reverse-text"
        env.taskset.id = "reverse-text"
    '''
    toml.write_text(textwrap.dedent(body) + textwrap.dedent(extra))
    return toml


def _prl(args: list[str], env: dict, cwd: Path, monkeypatch, capsys) -> tuple[int, str, str]:
    """``prl <args>`` in this process (as the CLI runs it: usage errors exit 2 with one line)."""
    import typer

    from prl.cli import commands
    from prl.cli.main import _run

    monkeypatch.setenv("PATH", env["PATH"])
    for var in ("PRL_RUN_NAME", "PRL_RUN_ID", "PRL_ATTEMPT_CONFIG_DIR", "PRL_ATTEMPT_LOG_DIR"):
        monkeypatch.setenv(var, "")  # set by the command; restored after the test
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    fn = {"rl": commands.cmd_rl, "sft": commands.cmd_sft, "inference": commands.cmd_inference}[args[0]]
    try:
        _run(fn, args[1:])
    except typer.Exit as exc:
        code = exc.exit_code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_rl_slurm_dry_run_writes_the_job_and_submits_nothing(tmp_path, fake_sbatch, model, monkeypatch, capsys):
    toml = _rl_toml(
        tmp_path, model, '[slurm]\npartition = "gpu"\nsetup = ["module load cuda", "source .venv/bin/activate"]\n'
    )
    code, out, err = _prl(
        ["rl", "@", str(toml), "--dry-run", "--slurm.account", "proj", "--slurm.mem", "64G"],
        fake_sbatch,
        tmp_path,
        monkeypatch,
        capsys,
    )
    assert code == 0, err
    run = tmp_path / "out" / "job"
    script = run / "launcher" / "rl.sbatch"
    assert f"sbatch {script}" in out
    assert not fake_sbatch["marker"].exists()
    text = script.read_text()
    for line in (
        "#SBATCH --partition=gpu",
        "#SBATCH --account=proj",
        "#SBATCH --mem=64G",
        "#SBATCH --nodes=1",
        "#SBATCH --job-name=job",
        f"#SBATCH --output={run / 'launcher' / 'logs' / 'job_%j.log'}",
    ):
        assert line in text.splitlines()
    # Setup lines run before prl, in order.
    assert text.index("module load cuda") < text.index("source .venv/bin/activate") < text.index("srun ")
    plan = json.loads((run / "launcher" / "rl.plan.json").read_text())
    assert [p["name"] for p in plan["processes"]] == ["inference", "orchestrator", "trainer"]
    # Single-node SLURM runs also get the whole resolved config (rl.json).
    rl = json.loads((run / "configs" / "latest" / "resolved" / "rl.json").read_text())
    assert rl["slurm"]["partition"] == "gpu" and rl["deployment"]["type"] == "slurm"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_multi_node_spelling_reserves_every_node(tmp_path, fake_sbatch, model, monkeypatch, capsys):
    extra = """
        [deployment]
        type = "multi_node"
        num_train_nodes = 2
        num_infer_nodes = 1
        [trainer]
        num_workers = 4
        [orchestrator]
        num_train_workers = 4
    """
    code, out, err = _prl(
        ["rl", "@", str(_rl_toml(tmp_path, model, extra)), "--dry-run"], fake_sbatch, tmp_path, monkeypatch, capsys
    )
    assert code == 0, err
    launcher = tmp_path / "out" / "job" / "launcher"
    assert "#SBATCH --nodes=3" in (launcher / "rl.sbatch").read_text()
    plan = json.loads((launcher / "rl.plan.json").read_text())
    assert (plan["num_infer_nodes"], plan["num_train_nodes"], plan["nproc_per_node"]) == (1, 2, 2)
    logs = tmp_path / "out" / "job" / "logs" / "attempt_1"
    assert os.readlink(logs / "trainer.log") == "trainer/node_0.log"
    assert not (tmp_path / "out" / "job" / "configs" / "latest" / "resolved" / "rl.json").exists()


def test_two_inference_nodes_run_an_engine_each_behind_a_router_on_the_first(
    tmp_path, fake_sbatch, model, monkeypatch, capsys
):
    from prl_launcher_slurm.node import node_processes

    extra = """
        [deployment]
        type = "multi_node"
        num_infer_nodes = 2
        num_train_nodes = 1
        [inference.server]
        backend_port = 8200
        [rollout_transport]
        type = "filesystem"
    """
    monkeypatch.delenv("PRL_API_KEY", raising=False)
    code, out, err = _prl(
        ["rl", "@", str(_rl_toml(tmp_path, model, extra)), "--dry-run"], fake_sbatch, tmp_path, monkeypatch, capsys
    )
    assert code == 0, err
    launcher = tmp_path / "out" / "job" / "launcher"
    assert "#SBATCH --nodes=3" in (launcher / "rl.sbatch").read_text()
    plan = json.loads((launcher / "rl.plan.json").read_text())
    assert (launcher / "rl.plan.json").stat().st_mode & 0o077 == 0  # holds the engines' key
    resolved = tmp_path / "out" / "job" / "configs" / "latest" / "resolved"
    engines = [json.loads((resolved / "inference" / f"node_{k}.json").read_text())["server"] for k in (0, 1)]
    assert [(e["host"], e["port"], e["engines"]) for e in engines] == [("0.0.0.0", 8200, 1), ("0.0.0.0", 8201, 1)]
    assert [e["port"] for e in plan["infer_engines"]] == [8200, 8201] and plan["api_key"]
    monkeypatch.setattr("prl_launcher_slurm.node.node_addr", lambda host: f"{host}.cluster")
    hosts = ["a", "b", "c"]
    first, second, trainer = (node_processes(plan, rank, hosts, "7") for rank in range(3))
    router = next(p for p in first if p.argv[1:3] == ["-m", "prl.engines"])
    assert router.argv[-2:] == ["http://a.cluster:8200", "http://b.cluster:8201"] and router.ready_file
    assert router.log_path.name == "router.log" and router.env["PRL_API_KEY"] == plan["api_key"]
    assert {p.role for p in first} == {"inference", "orchestrator"}
    # The second node serves its engine until the first is done (a marker in the run's logs).
    assert [p.health_url for p in second] == ["http://127.0.0.1:8201", None]
    assert second[1].argv[-2:] == [
        "--wait-for",
        str(tmp_path / "out" / "job" / "logs" / "attempt_1" / "inference" / ".node_0_done"),
    ]
    assert second[0].env["PRL_API_KEY"] == plan["api_key"] and "PRL_READY_FILE" not in second[0].env
    assert [p.role for p in trainer] == ["trainer"]


def test_sft_slurm_dry_run_plans_the_trainer_only(tmp_path, fake_sbatch, model, monkeypatch, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "a", "completion": "b"}\n')
    args = [
        "sft",
        "--model.name",
        str(model),
        "--data.name",
        str(data),
        "--run.name",
        "s",
        "--output-dir",
        str(tmp_path / "out"),
        "--slurm",
        "--dry-run",
    ]
    code, out, err = _prl(args, fake_sbatch, tmp_path, monkeypatch, capsys)
    assert code == 0, err
    plan = json.loads((tmp_path / "out" / "s" / "launcher" / "sft.plan.json").read_text())
    assert [p["argv"][-3:] for p in plan["processes"]] == [["sft-trainer", "@", plan["trainer_argv"][-1]]]


@pytest.mark.parametrize(
    ("extra", "args", "needle"),
    [
        ("", ["--slurm"], "--slurm: sbatch is not on PATH"),
        (
            '[deployment]\ntype = "multi_node"\nnum_train_nodes = 3\nnum_infer_nodes = 1\n[trainer]\nnum_workers = 4\n'
            "[orchestrator]\nnum_train_workers = 4\n",
            [],
            "--trainer.num-workers: 4 trainer processes cannot be split",
        ),
        ('[deployment]\ntype = "multi_node"\nnum_train_nodes = 1\n', [], "--deployment.num-infer-nodes"),
        ('[deployment]\ntype = "slurm"\nnum_infer_nodes = 2\n', [], "num_infer_nodes (2) needs num_train_nodes >= 1"),
        ('[slurm]\ntemplate = "bad.j2"\n', [], "--slurm.template: "),
        ('[slurm]\ntemplate = "unknown.j2"\n', [], "does not render: 'nodez' is undefined"),
        ('[deployment]\ntype = "local"\n', ["--slurm"], "[slurm] is set but [deployment] type is 'local'"),
    ],
)
def test_bad_slurm_input_is_one_line_and_exit_2(tmp_path, fake_sbatch, extra, args, needle, model, monkeypatch, capsys):
    (tmp_path / "bad.j2").write_text("#SBATCH --nodes={{ nodes }\n")
    (tmp_path / "unknown.j2").write_text("#SBATCH --nodes={{ nodez }}\n")
    env = fake_sbatch if "sbatch is not on PATH" not in needle else {"PATH": "/nonexistent"}
    if env["PATH"] == "/nonexistent":
        env = {"PATH": str(Path(sys.executable).parent)}
    code, out, err = _prl(
        ["rl", "@", str(_rl_toml(tmp_path, model, extra)), "--dry-run", *args], env, tmp_path, monkeypatch, capsys
    )
    assert code == 2, (out, err)
    assert needle in err
    assert "Traceback" not in err
    assert not fake_sbatch["marker"].exists()


@pytest.mark.parametrize(
    ("deployment", "slurm", "picked"),
    [
        ({"type": "single_node", "gpus_per_node": 2, "num_train_gpus": 1, "num_infer_gpus": 1}, None, "local"),
        ({"type": "single_node", "gpus_per_node": 2, "num_train_gpus": 1, "num_infer_gpus": 1}, {}, "slurm"),
        ({"type": "multi_node", "num_train_nodes": 2, "num_infer_nodes": 1}, None, "slurm"),
        (None, {"partition": "p"}, "slurm"),
        (None, None, "local"),
    ],
)
def test_reference_deployment_spellings_pick_the_launcher_and_keep_the_topology(deployment, slurm, picked):
    from prl.config.roots import RLConfig

    data = {k: v for k, v in {"deployment": deployment, "slurm": slurm}.items() if v is not None}
    config = RLConfig.model_validate(data)
    assert config.deployment.type == picked
    for key, value in (deployment or {}).items():
        if key != "type":
            assert getattr(config.deployment, key) == value
    # The resolved config (rl.json) loads back as the same launcher.
    assert RLConfig.model_validate_json(config.model_dump_json()).deployment == config.deployment


def test_job_log_follower_names_the_node_of_a_failure(tmp_path, capsys):
    from prl_launcher_slurm.job import LogFollower

    log = tmp_path / "job.log"
    log.write_text(
        "prl: job 7 on a1,b2,b3\n"
        "0: [orchestrator] Step 1 | orch | Reward 0.5\n"
        "2: noise from a rank\n"
        "2: prl: process 'trainer' exited with code 1; stopping the others. Last lines of t.log:\n"
        "2:     RuntimeError: boom\n"
        "0: not a status line\n"
        "1: [trainer] Step 1 | trai"
    )
    follower = LogFollower(log)
    follower.poll()
    out = capsys.readouterr()
    assert out.out == "node 0 (a1): [orchestrator] Step 1 | orch | Reward 0.5\n"
    assert out.err.splitlines() == [
        "prl: node 2 (b3): process 'trainer' exited with code 1; stopping the others. Last lines of t.log:",
        "    RuntimeError: boom",
    ]
    with open(log, "a") as fh:  # the rest of a line written in two pieces
        fh.write("ner | Loss 0.1\n")
    follower.poll()
    assert capsys.readouterr().out == "node 1 (b2): [trainer] Step 1 | trainer | Loss 0.1\n"


def _inference_args(tmp_path, model, *extra: str) -> list[str]:
    return ["inference", "--model.name", str(model), "--output-dir", str(tmp_path / "out"), "--run.name", "srv", *extra]


def test_inference_slurm_dry_run_renders_a_server_job(tmp_path, fake_sbatch, model, monkeypatch, capsys):
    """``[slurm]`` in the inference TOML: one node serving on every interface, with a key for
    its admin routes made for the job; nothing submitted."""
    monkeypatch.delenv("PRL_API_KEY", raising=False)
    toml = tmp_path / "inference.toml"
    toml.write_text('[slurm]\npartition = "cpu"\ntime = "02:00:00"\n[server]\nport = 0\n')
    args = [*_inference_args(tmp_path, model, "--dry-run"), "@", str(toml)]
    code, out, err = _prl(args, fake_sbatch, tmp_path, monkeypatch, capsys)
    assert code == 0, err
    launcher = tmp_path / "out" / "srv" / "launcher"
    assert f"sbatch {launcher / 'inference.sbatch'}" in out and "Dry run complete" in out
    assert not fake_sbatch["marker"].exists()
    text = (launcher / "inference.sbatch").read_text().splitlines()
    assert {"#SBATCH --partition=cpu", "#SBATCH --time=02:00:00", "#SBATCH --nodes=1"} <= set(text)
    assert subprocess.run(["bash", "-n", str(launcher / "inference.sbatch")]).returncode == 0
    # The job serves the resolved config; it must not submit itself again.
    resolved = json.loads((tmp_path / "out" / "srv" / "configs" / "latest" / "resolved" / "inference.json").read_text())
    assert resolved["slurm"] is None and resolved["server"]["host"] == "0.0.0.0"
    plan = json.loads((launcher / "inference.plan.json").read_text())
    (spec,) = plan["processes"]
    assert spec["argv"][-3:] == [
        "inference",
        "@",
        str(tmp_path / "out" / "srv" / "configs" / "attempt_1" / "resolved" / "inference.json"),
    ]
    assert spec["service"] is False  # the job's only process: it serves until cancelled
    key = launcher / "api_key"
    assert spec["env"]["PRL_API_KEY"] == key.read_text().strip() and key.stat().st_mode & 0o777 == 0o600

    # A key of the user's is used as it is: no key file, none in the plan.
    args = _inference_args(tmp_path, model, "--slurm", "--server.api-key", "mine", "--run.name", "srv2", "--dry-run")
    code, out, err = _prl(args, fake_sbatch, tmp_path, monkeypatch, capsys)
    assert code == 0, err
    plan = json.loads((tmp_path / "out" / "srv2" / "launcher" / "inference.plan.json").read_text())
    assert "PRL_API_KEY" not in plan["processes"][0]["env"]
    assert not (tmp_path / "out" / "srv2" / "launcher" / "api_key").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--slurm"], "--slurm: sbatch is not on PATH"),
        (["--slurm.gpus-per-node", "-1"], "--slurm.gpus-per-node"),
        (["--slurm.template", "missing.j2"], "--slurm.template: cannot read missing.j2"),
        (["--slurm.nodes", "2"], "--slurm.nodes"),
    ],
)
def test_bad_inference_slurm_input_is_one_line_and_exit_2(
    tmp_path, fake_sbatch, model, args, needle, monkeypatch, capsys
):
    env = {"PATH": str(Path(sys.executable).parent)} if "not on PATH" in needle else fake_sbatch
    code, out, err = _prl([*_inference_args(tmp_path, model, "--dry-run"), *args], env, tmp_path, monkeypatch, capsys)
    assert code == 2, (out, err)
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2, err


def test_inference_dry_run_without_slurm_only_validates(tmp_path, model, monkeypatch, capsys):
    code, out, err = _prl(
        _inference_args(tmp_path, model, "--dry-run"), {"PATH": os.environ["PATH"]}, tmp_path, monkeypatch, capsys
    )
    assert code == 0, err
    assert "Dry run complete: the config is valid" in out and not (tmp_path / "out").exists()


def test_rl_fills_inference_slurm_but_the_server_runs_inside_the_run_job(
    tmp_path, fake_sbatch, model, monkeypatch, capsys
):
    toml = _rl_toml(tmp_path, model, '[slurm]\npartition = "gpu"\n[inference.slurm]\ntime = "01:00:00"\n')
    code, out, err = _prl(["rl", "@", str(toml), "--dry-run"], fake_sbatch, tmp_path, monkeypatch, capsys)
    assert code == 0, err
    resolved = tmp_path / "out" / "job" / "configs" / "latest" / "resolved"
    # The shared [slurm] filled what inference.slurm left unset ...
    rl = json.loads((resolved / "rl.json").read_text())
    assert (rl["inference"]["slurm"]["partition"], rl["inference"]["slurm"]["time"]) == ("gpu", "01:00:00")
    # ... but the inference child serves inside the run's one job, never submitting its own.
    assert json.loads((resolved / "inference.json").read_text())["slurm"] is None
    assert [p.name for p in (tmp_path / "out" / "job" / "launcher").glob("*.sbatch")] == ["rl.sbatch"]


@pytest.mark.parametrize(
    ("extra", "args", "needle"),
    [
        (
            '[slurm]\npartition = "a"\n',
            ["--inference.slurm.partition", "b"],
            "Shared config conflicts with matching sub-config field(s): "
            "slurm.partition='a' vs inference.slurm.partition='b'",
        ),
        ("", ["--inference.slurm"], "--inference.slurm: prl rl starts its inference server itself"),
    ],
)
def test_rl_inference_slurm_that_cannot_hold_is_exit_2(
    tmp_path, fake_sbatch, model, extra, args, needle, monkeypatch, capsys
):
    toml = _rl_toml(tmp_path, model, extra)
    code, out, err = _prl(["rl", "@", str(toml), "--dry-run", *args], fake_sbatch, tmp_path, monkeypatch, capsys)
    assert code == 2, (out, err)
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "out" / "job" / "launcher").exists()


def test_server_address_is_the_node_and_the_bound_port(tmp_path, monkeypatch):
    from prl_launcher_slurm.server import ServerAddress

    monkeypatch.setattr("prl_launcher_slurm.node.node_addr", lambda name: f"{name}.cluster")
    ready = tmp_path / "inference.address"
    address = ServerAddress("42", ready, tmp_path)
    assert address("gpu7") is None  # not serving yet
    ready.write_text("")
    assert address("gpu7") is None  # being written
    ready.write_text("http://0.0.0.0:41234\n")
    line = address("gpu7")
    assert line.startswith("prl: inference server of SLURM job 42 is up at http://gpu7.cluster:41234 (node gpu7)")
    assert (tmp_path / "server_url").read_text() == "http://gpu7.cluster:41234\n"
    ready.write_text("http://10.1.2.3:8000\n")  # bound to one address: that one
    assert "up at http://10.1.2.3:8000 " in address("gpu7")
