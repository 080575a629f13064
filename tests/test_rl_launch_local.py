"""``prl rl`` end to end through the local launcher: real inference (torch backend, tiny
model), the real orchestrator and the real torch trainer, two RL steps on reverse-text."""

from __future__ import annotations

import json

import pytest

from prl.testing.configs import VLLM_CPU_FLAGS, tiny_rl_toml

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_weights_filesystem")
pytest.importorskip("prl_launcher_local")
pytest.importorskip("prl_tasks_builtin")
pytest.importorskip("prl_trainer_torch")


def _rl_toml(tmp_path):
    """A two-step reverse-text RL config on a tiny model made here; inference takes any free
    port (``port = 0``), which prl rl pins at launch for the orchestrator too."""
    from prl_model_init.build import make_model

    model = make_model(tmp_path / "model", preset="tiny")
    return tiny_rl_toml(tmp_path, model, {"ckpt": {}})


@pytest.mark.slow
@pytest.mark.parametrize(
    ("transport", "weights", "backend"),
    [
        ("filesystem", "filesystem", []),
        ("zmq", "nccl", []),
        pytest.param("filesystem", "nccl", VLLM_CPU_FLAGS, marks=pytest.mark.vllm, id="vllm-nccl"),
    ],
)
def test_prl_rl_runs_to_the_end_with_the_local_launcher(tmp_path, capsys, transport, weights, backend):
    from prl.cli.commands import cmd_rl

    toml = _rl_toml(tmp_path)
    # Ports 0: prl rl picks free ones and tells every component (batches over zmq, weights
    # over the nccl transport's group, gloo on CPU).
    flags = ["--rollout-transport.type", transport, "--rollout-transport.port", "0"]
    flags += ["--weight-broadcast.type", weights, *(["--weight-broadcast.port", "0"] if weights == "nccl" else [])]
    code = cmd_rl(["@", str(toml), "--run.name", "e2e", *flags, *backend])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert "[orchestrator] Step 2 |" in out.out and "[trainer] Step 2 |" in out.out
    run_dir = tmp_path / "outputs" / "e2e"
    logs = run_dir / "logs" / "attempt_1"
    # where the logs are before anything starts, a summary with the reward at the end
    assert out.out.startswith(f"Run directory: {run_dir}\nStarting inference, orchestrator, trainer ... (logs: {logs}:")
    assert "\n  reward:          " in out.out and "(step 1 → 2)" in out.out
    assert f"\n  prl export {run_dir / 'checkpoints' / 'step_2'}   #" in out.out
    assert (logs / "inference.log").exists() and (logs / "trainer.log").exists()
    rows = [json.loads(x) for x in (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("producer") == "orch" and r.get("step")] == [1, 2]
    trainer = {r["step"]: r for r in rows if r.get("producer") == "trainer" and "loss/all" in r}
    assert sorted(trainer) == [1, 2]
    assert all(r["optim/grad_norm"] > 0 and r["entropy/all/mean"] > 0 for r in trainer.values())
    # The final version was handed over and acknowledged (the orchestrator waited for it).
    assert (run_dir / "broadcasts" / "step_2" / ".finished").exists()
    # The final checkpoint is complete: the trainer's DCP part and the orchestrator's part.
    final = run_dir / "checkpoints" / "step_2"
    assert (final / "trainer" / "COMPLETE").exists() and (final / "orchestrator" / "COMPLETE").exists()
    # Batches went over the socket under zmq, through batches/ under filesystem; weights
    # went as files only under filesystem (nccl leaves the handshake's markers alone).
    assert (run_dir / "batches").exists() == (transport == "filesystem")
    files = list((run_dir / "broadcasts").rglob("*.safetensors"))
    assert bool(files) == (weights == "filesystem")
    if weights == "nccl":
        log = (logs / "orchestrator.log").read_text()
        assert "inference now serves policy version 2" in log
    _assert_trainer_annotations(run_dir / "monitors" / "file")


def _assert_trainer_annotations(file_dir):
    """The trainer annotated the branches it trained, token for token (``trainer.annotations``)."""
    from prl_monitor_file import read_annotations, read_trace

    index = [json.loads(x) for x in (file_dir / "traces" / "stream.index.jsonl").read_text().splitlines()]
    traces = {row["id"]: row for row in index}
    records = read_annotations(file_dir, "trainer")
    assert records and {r["info"]["step"] for r in records} <= {1, 2}
    some_id = records[0]["trace_id"]
    row = traces[some_id]
    trace = read_trace(file_dir / "traces" / "stream", int(row["chunk"]), int(row["offset"]))
    for record in read_annotations(file_dir, "trainer", some_id):
        for branch in record["branches"]:
            ids = trace["branches"][branch["index"]]["token_ids"]
            assert len(branch["trainer_logprobs"]) == len(ids) == len(branch["entropies"])
            assert sum(branch["loss_mask"]) > 0 and branch["trainer_logprobs"][0] is None


@pytest.mark.slow
def test_a_trainer_usage_error_ends_prl_rl_with_one_line_and_exit_2(tmp_path, capsys):
    from prl.cli.commands import cmd_rl

    toml = _rl_toml(tmp_path)
    code = cmd_rl(["@", str(toml), "--run.name", "bad", "--trainer.model.attn-implementation", "bogus"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [
        "prl: trainer: Config file error: model.attn_implementation: 'bogus' is not supported by transformers here"
    ]


@pytest.mark.slow
def test_a_whole_prl_rl_run_resumes_from_its_last_complete_step(tmp_path, capsys):
    """Two steps, stop; ``--resume`` with a higher max_steps continues at step 3 in a new
    attempt, from the checkpoint both trainer and orchestrator marked complete."""
    from prl.cli.commands import cmd_rl

    toml = _rl_toml(tmp_path)
    assert cmd_rl(["@", str(toml), "--run.name", "again"]) == 0
    capsys.readouterr()
    run_dir = tmp_path / "outputs" / "again"
    assert (run_dir / "checkpoints" / "step_2" / "trainer" / "COMPLETE").exists()
    code = cmd_rl(["@", str(toml), "--run.name", "again", "--resume", "--max-steps", "3"])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert "[orchestrator] Step 3 |" in out.out and "[trainer] Step 3 |" in out.out
    assert "[trainer] Step 1 |" not in out.out  # nothing before the checkpoint ran again
    assert (run_dir / "logs" / "attempt_2" / "trainer.log").exists()
    rows = [json.loads(x) for x in (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    trainer_steps = [r["step"] for r in rows if r.get("producer") == "trainer" and "loss/all" in r]
    assert trainer_steps == [1, 2, 3]
    final = run_dir / "checkpoints" / "step_3"
    assert (final / "trainer" / "COMPLETE").exists() and (final / "orchestrator" / "COMPLETE").exists()
