"""The wandb monitor inside real runs, W&B offline: a tiny ``prl rl`` (with an online eval)
and a tiny ``prl sft`` with online eval. The offline ``.wandb`` files are read back with the
record reader of test_wandb_monitor.py. The same runs check the rest of the observability
contract: the prime monitor (prime-runs disabled) writing ``monitors/prime/run.json``, and
the file monitor's time-keyed rows, perf and entropy metrics and eval traces."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from prl_monitor_wandb.monitor import run_id

from prl.testing.configs import REVERSE_TEXT, tiny_rl_toml

for _member in ("prl_model_init", "prl_inference_torch", "prl_launcher_local", "prl_tasks_builtin"):
    pytest.importorskip(_member)
pytest.importorskip("prl_trainer_torch")
pytest.importorskip("prl_monitor_prime")

sys.path.insert(0, str(Path(__file__).parent))  # the .wandb record reader of the unit tests
from test_wandb_monitor import _complete_records, _history  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-home" / "cache"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-home" / "config"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("PRIME_RUNS_MODE", "disabled")  # the prime monitor: nothing leaves the machine
    monkeypatch.delenv("PRIME_API_KEY", raising=False)


def _runs(root):
    """{run id: (run record, history rows)} of every offline run file under ``root``."""
    out = {}
    for run_file in sorted(root.rglob("run-*.wandb")):
        records = _complete_records(run_file)
        (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        prev = out.get(run.run_id, (run, []))[1]
        out[run.run_id] = (run, prev + _history(records))
    return out


def _rl_toml(tmp_path, model):
    """The tiny run with both monitors and an online eval of reverse-text every step."""
    monitors = {"wandb": {"tags": ["ci"]}, "prime": {}}
    online_eval = {"interval": 1, "num_examples": 2, "sampling": {"max_completion_tokens": 8}, "source": [REVERSE_TEXT]}
    return tiny_rl_toml(tmp_path, model, {"monitors": monitors, "orchestrator": {"eval": online_eval}})


def test_prl_rl_logs_trainer_and_orchestrator_runs_named_after_the_prl_run(tmp_path, offline, capsys):
    from prl_model_init.build import make_model

    from prl.cli.commands import cmd_rl

    model = make_model(tmp_path / "model", preset="tiny")
    code = cmd_rl(["@", str(_rl_toml(tmp_path, model)), "--run.name", "RL-Wandb"])
    assert code == 0, capsys.readouterr().err[-3000:]
    run_dir = tmp_path / "outputs" / "rl-wandb"
    runs = _runs(run_dir / "monitors" / "wandb")
    assert set(runs) == {run_id(run_dir, "trainer"), run_id(run_dir, "orch")}
    for producer in ("trainer", "orch"):
        run, history = runs[run_id(run_dir, producer)]
        assert (run.display_name, run.run_group, run.job_type) == ("rl-wandb", "rl-wandb", producer)
        assert run.project == "prl" and list(run.tags) == ["ci"]
        stepped = {h["step"] for h in history if "step" in h}
        assert {1, 2} <= stepped, (producer, stepped)
    trainer = runs[run_id(run_dir, "trainer")][1]
    assert any(h.get("loss/all") is not None and h.get("entropy/all/mean", 0) > 0 for h in trainer)
    orch = runs[run_id(run_dir, "orch")][1]
    assert any("reward/all/mean" in h for h in orch)
    assert any("eval/reverse-text/avg@1" in h for h in orch)  # the online eval during RL
    assert any("rollouts/eval/nrows" in h for h in orch) and any("rollouts/train/nrows" in h for h in orch)

    # The same run, seen by the file monitor: the rest of the observability contract.
    file_dir = run_dir / "monitors" / "file"
    rows = [json.loads(x) for x in (file_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r.get("producer") == "trainer" and "loss/all" in r]
    assert all(r["entropy/all/std"] >= 0 and r["entropy/all/max"] >= r["entropy/all/mean"] for r in steps)
    assert all(r["perf/throughput_per_gpu"] > 0 and "perf/mfu" not in r for r in steps)  # CPU: no peak
    timed = [r for r in rows if r["step"] is None and r.get("producer") == "orch"]
    assert timed and all("event_loop_lag/max" in r and "concurrency/limit" in r for r in timed)
    assert any("inference/in_flight" in r and "dispatcher/dispatched" in r for r in timed)
    index = [json.loads(x) for x in (file_dir / "traces" / "stream.index.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in index} == {"train", "eval"}
    # [monitors.prime] reaches the orchestrator only: one platform training run per prl run
    (prime,) = json.loads((run_dir / "monitors" / "prime" / "run.json").read_text())["runs"]
    assert (prime["producer"], prime["kind"], prime["name"]) == ("orch", "train", "rl-wandb")
    assert prime["status"] == "completed" and prime["id"].startswith("disabled-")


def test_prl_sft_and_its_online_eval_share_one_wandb_run(tmp_path, offline, capsys):
    from prl_model_init.build import make_model
    from prl_tasks_builtin.reverse_text import ReverseText

    from prl.cli.commands import cmd_sft
    from prl.serving import free_port

    model = make_model(tmp_path / "model", preset="tiny")
    tasks = list(ReverseText(ReverseText.Config()).tasks("train"))[:64]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": t.prompt, "completion": t.data["answer"]}) + "\n" for t in tasks))
    toml = tmp_path / "sft.toml"
    toml.write_text(
        textwrap.dedent(f'''
        max_steps = 2
        output_dir = "{tmp_path / "outputs"}"
        env_vars = {{ OMP_NUM_THREADS = "1" }}
        [model]
        name = "{model}"
        [data]
        name = "{data}"
        seq_len = 128
        batch_size = 4
        [monitors.wandb]
        [monitors.prime]
        [inference.server]
        port = {free_port("127.0.0.1")}
        [eval]
        interval = 1
        num_examples = 2
        cancel_on_new_checkpoint = false
        [eval.sampling]
        temperature = 0.0
        max_completion_tokens = 8
        [[eval.source]]
        name = "reverse-text"
        env.taskset.id = "reverse-text"
    ''')
    )
    code = cmd_sft(["@", str(toml), "--run.name", "sft-wandb"])
    assert code == 0, capsys.readouterr().err[-3000:]
    run_dir = tmp_path / "outputs" / "sft-wandb"
    wandb_dir = run_dir / "monitors" / "wandb"
    runs = _runs(wandb_dir)
    assert list(runs) == [run_id(run_dir, "trainer")]  # one W&B run for both processes
    assert len(list(wandb_dir.rglob("run-*.wandb"))) == 2  # written by two processes
    run, history = runs[run_id(run_dir, "trainer")]
    assert (run.display_name, run.job_type) == ("sft-wandb", "trainer")
    assert sorted(h["step"] for h in history if "loss/mean" in h) == [1, 2]
    assert sorted(h["step"] for h in history if "eval/reverse-text/avg@1" in h) == [0, 1, 2]
    # prime: the trainer's training run and online eval's evaluation of its source
    prime = json.loads((run_dir / "monitors" / "prime" / "run.json").read_text())["runs"]
    assert sorted((r["producer"], r["kind"], r["source"], r["status"]) for r in prime) == [
        ("online-eval", "eval", "reverse-text", "completed"),
        ("trainer", "train", None, "completed"),
    ]
