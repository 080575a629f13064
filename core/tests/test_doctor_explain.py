"""``prl doctor`` and ``prl rl --explain`` through the CLI, on a model made of one
safetensors header (the size estimates read headers only, never weights)."""

from __future__ import annotations

import json
import re
import socket
import struct
import textwrap

import pytest
from typer.testing import CliRunner

from prl.cli.main import app

PARAMS = 1000 * 1000


def _model(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    header = json.dumps({"w": {"dtype": "F32", "shape": [1000, 1000], "data_offsets": [0, 4 * PARAMS]}}).encode()
    (model / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    config = {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 256}
    (model / "config.json").write_text(json.dumps(config))
    return model


def _toml(tmp_path, **extra):
    toml = tmp_path / "rl.toml"
    toml.write_text(
        textwrap.dedent(f'''
        max_steps = 5
        seq_len = 256
        output_dir = "{extra.get("output_dir", tmp_path / "outputs")}"
        [model]
        name = "{extra.get("model", _model(tmp_path))}"
        [orchestrator]
        batch_size = 8
        [orchestrator.train]
        group_size = 2
        [orchestrator.train.sampling]
        max_completion_tokens = 16
        [[orchestrator.train.source]]
        name = "reverse-text"
        env.taskset.id = "reverse-text"
        [ckpt]
        keep_last = 2
        [inference.server]
        port = {extra.get("port", 0)}
        ''')
    )
    return toml


def _cli(*argv):
    return CliRunner().invoke(app, list(argv))


def test_explain_prints_what_the_config_means_and_launches_nothing(tmp_path):
    pytest.importorskip("prl_tasks_builtin")
    result = _cli("rl", "@", str(_toml(tmp_path)), "--explain")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Per step: 8 samples (rollouts), each at most seq_len = 256 tokens" in out
    assert "completion tokens per step: at most 8 x 16 = 128" in out
    assert "tokens per step: at most 8 x 256 = 2,048" in out
    assert "Micro-batches per rank (1 rank): up to ceil(8 / 1) = 8" in out
    assert "at most 8 step(s) after the policy version" in out  # the default max_off_policy_steps
    assert "1.0 M parameters (safetensors headers), trained in float32" in out
    # float32 weights + two AdamW moments: 12 MB per checkpoint, two kept.
    assert "Checkpoint: 11.4 MiB each (weights + optimizer state), 2 kept: 22.9 MiB" in out
    assert "Trainer memory per rank (rough)" in out
    assert not (tmp_path / "outputs").exists()


def test_explain_of_a_bad_field_is_the_usual_usage_error(tmp_path):
    pytest.importorskip("prl_tasks_builtin")
    result = _cli("rl", "@", str(_toml(tmp_path)), "--orchestrator.batch-size", "7", "--explain")
    assert result.exit_code == 2
    assert "batch_size (7) must be divisible by the group_size" in result.output


def test_doctor_passes_on_a_machine_that_can_run_the_config(tmp_path):
    pytest.importorskip("prl_tasks_builtin")
    result = _cli("doctor", "@", str(_toml(tmp_path)))
    assert result.exit_code == 0, result.output
    assert "prl doctor: all" in result.output and "PROBLEM" not in result.output
    assert "ok       versions: torch " in result.output


def test_doctor_names_each_problem_in_one_line_and_exits_1(tmp_path):
    pytest.importorskip("prl_tasks_builtin")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        toml = _toml(tmp_path, port=port, model=tmp_path / "no-such-model", output_dir=blocker / "out")
        gpus = ["--deployment.gpus-per-node", "64", "--deployment.num-train-gpus", "40"]
        gpus += ["--deployment.num-infer-gpus", "24"]
        result = _cli("doctor", "@", str(toml), *gpus)
    assert result.exit_code == 1, result.output
    problems = [line for line in result.output.splitlines() if line.startswith("PROBLEM")]
    assert any(f"inference.server.port: port {port} on 127.0.0.1 is not free" in p for p in problems), problems
    assert any(f"model.name: model path '{tmp_path / 'no-such-model'}' does not exist" in p for p in problems)
    assert any("num_train_gpus (40) + num_infer_gpus (24) = 64 GPUs, but this machine has" in p for p in problems)
    assert any(p.startswith(f"PROBLEM  output_dir: cannot write under {blocker}") for p in problems), problems
    assert result.output.rstrip().endswith(f"prl doctor: {len(problems)} problems found")


def test_explain_counts_fewer_activations_the_more_layers_are_checkpointed(tmp_path):
    pytest.importorskip("prl_tasks_builtin")
    found, config = [], str(_toml(tmp_path))
    for flags in (
        [],
        ["--trainer.model.activation-checkpointing-freq", "2"],
        ["--trainer.model.activation-checkpointing-freq", "1"],
    ):
        ac = ["--trainer.model.activation-checkpointing"] if flags else []
        result = _cli("rl", "@", config, *ac, *flags, "--explain")
        assert result.exit_code == 0, result.output
        found.append(re.search(r"\+ activations ([\d.]+) (\w+)", result.output).groups())
    sizes = [float(v) * {"MiB": 1, "GiB": 1024}[unit] for v, unit in found]
    assert sizes[0] > sizes[1] > sizes[2] > 0
