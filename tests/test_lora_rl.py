"""LoRA under ``prl rl``: the config (filesystem broadcast chosen, nccl refused, the adapter
reaching trainer, orchestrator and inference) and real runs on the tiny model where the
trainer publishes an adapter per step and each inference backend serves it by name."""

from __future__ import annotations

import json
import re

import pytest

from prl.testing.configs import VLLM_CPU_FLAGS, tiny_rl_toml

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_weights_filesystem")
pytest.importorskip("prl_launcher_local")
pytest.importorskip("prl_tasks_builtin")
pytest.importorskip("prl_trainer_torch")

LORA = {"model": {"lora": {"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj"], "name": "policy-lora"}}}
# A dry run reads no weights: any directory stands in for the model, with a named renderer.
QWEN3 = {"orchestrator": {"renderer": {"name": "qwen3"}}}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from prl_model_init.build import make_model

    return make_model(tmp_path_factory.mktemp("lora") / "model", preset="tiny")


def _rl_toml(tmp_path, model, *extra: dict):
    """Two reverse-text RL steps on a tiny model, with the ``extra`` settings (LoRA, a renderer)."""
    return tiny_rl_toml(tmp_path, model, {"trainer": {"optim": {"lr": 5e-2}}, "ckpt": {}}, *extra)


def _resolved(tmp_path, name: str) -> dict:
    path = tmp_path / "outputs" / "lora" / "configs" / "latest" / "resolved" / f"{name}.json"
    return json.loads(path.read_text())


def test_lora_picks_filesystem_broadcast_and_reaches_every_component(tmp_path, capsys):
    from prl.cli.commands import cmd_rl

    toml = _rl_toml(tmp_path, tmp_path, LORA, QWEN3)
    assert cmd_rl(["@", str(toml), "--run.name", "lora", "--dry-run"]) == 0, capsys.readouterr().err
    for name in ("trainer", "orchestrator", "inference"):
        cfg = _resolved(tmp_path, name)
        assert cfg["model"]["lora"]["rank"] == 4 and cfg["model"]["lora"]["name"] == "policy-lora", name
    assert _resolved(tmp_path, "trainer")["weight_broadcast"]["type"] == "filesystem"
    assert _resolved(tmp_path, "orchestrator")["weight_broadcast"]["type"] == "filesystem"


def test_explicit_nccl_with_lora_is_one_line_and_exit_2(tmp_path, capsys):
    pytest.importorskip("prl_weights_nccl")
    from typer.testing import CliRunner

    from prl.cli.main import app

    toml = _rl_toml(tmp_path, tmp_path, LORA, QWEN3)
    argv = ["rl", "@", str(toml), "--run.name", "lora", "--weight-broadcast.type", "nccl", "--dry-run"]
    result = CliRunner().invoke(app, argv)
    err = [x for x in result.output.splitlines() if x.strip()]
    assert result.exit_code == 2
    assert len(err) == 1 and "weight_broadcast.type 'nccl' cannot carry LoRA adapters" in err[0], err


def test_lora_only_under_the_trainer_is_refused(tmp_path, capsys):
    from typer.testing import CliRunner

    from prl.cli.main import app

    toml = _rl_toml(tmp_path, tmp_path, QWEN3)
    argv = ["rl", "@", str(toml), "--run.name", "lora", "--trainer.model.lora.rank", "4", "--dry-run"]
    result = CliRunner().invoke(app, argv)
    err = [x for x in result.output.splitlines() if x.strip()]
    assert result.exit_code == 2 and len(err) == 1 and "set LoRA once under [model.lora]" in err[0], err


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend", [pytest.param([], id="torch"), pytest.param(VLLM_CPU_FLAGS, marks=pytest.mark.vllm, id="vllm")]
)
def test_lora_rl_serves_each_published_adapter(tmp_path, capsys, tiny, backend):
    from prl.cli.commands import cmd_rl

    toml = _rl_toml(tmp_path, tiny, LORA)
    # Deterministic: batch 2 is sampled on version 1 only, so sampler and trainer must agree.
    code = cmd_rl(["@", str(toml), "--run.name", "lora", "--orchestrator.deterministic", *backend])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert "[orchestrator] Step 2 |" in out.out and "[trainer] Step 2 |" in out.out
    run_dir = tmp_path / "outputs" / "lora"
    logs = run_dir / "logs" / "attempt_1"
    # Every version went to inference as an adapter, under the adapter's name; requests
    # named that model (the server answers 404 for a name it does not serve, so the
    # rollouts of step 2 were sampled from a loaded adapter).
    orch = (logs / "orchestrator.log").read_text()
    for version in (0, 1, 2):
        assert f"inference now serves policy version {version}" in orch
    step = run_dir / "broadcasts" / "step_2"
    assert (step / "adapter_model.safetensors").exists() and not (step / "model.safetensors").exists()
    assert json.loads((step / "adapter_config.json").read_text())["target_modules"] == ["q_proj", "v_proj"]
    if not backend:
        served = re.findall(r"serving LoRA adapter 'policy-lora' from (\S+)", (logs / "inference.log").read_text())
        assert [s.rsplit("/", 1)[-1] for s in served] == ["step_0", "step_1", "step_2"]
    rows = [json.loads(x) for x in (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    trainer = {r["step"]: r for r in rows if r.get("producer") == "trainer" and "loss/all" in r}
    assert sorted(trainer) == [1, 2] and all(r["optim/grad_norm"] > 0 for r in trainer.values())
    # Sampler and trainer agree on the adapted policy (about 5e-14 on CPU with the torch
    # backend): had inference sampled batch 2 from the base model or the version-0 adapter,
    # the mismatch would be that of a lr 5e-2 update (about 4e-2).
    assert trainer[2]["mismatch_kl/all/mean"] < 1e-6
    final = run_dir / "checkpoints" / "step_2" / "trainer"
    assert (final / "COMPLETE").exists() and (final / "adapter_config.json").exists()
    if not backend:
        _resumes_onto_the_adapter(toml, run_dir, capsys)


def _resumes_onto_the_adapter(toml, run_dir, capsys):
    """``--resume``: the trainer restores the adapter, re-publishes version 2, and inference
    (started from the base model) loads it before step 3 is sampled."""
    from prl.cli.commands import cmd_rl

    argv = ["@", str(toml), "--run.name", "lora", "--orchestrator.deterministic", "--resume", "--max-steps", "3"]
    code = cmd_rl(argv)
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert "[trainer] Step 3 |" in out.out and "[trainer] Step 1 |" not in out.out
    log = (run_dir / "logs" / "attempt_2" / "inference.log").read_text()
    served = re.findall(r"serving LoRA adapter 'policy-lora' from (\S+)", log)
    assert [s.rsplit("/", 1)[-1] for s in served] == ["step_2", "step_3"]
    rows = [json.loads(x) for x in (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    step3 = [r for r in rows if r.get("producer") == "trainer" and r.get("step") == 3 and "loss/all" in r]
    assert len(step3) == 1 and step3[0]["mismatch_kl/all/mean"] < 1e-6
