"""SFT and the RL step on the tiny-moe preset (Qwen3-MoE, 8 experts, top-2), in process on
the CPU: the MoE metrics every step, ``model.freeze_moe_router`` (auto: trained in SFT,
frozen in RL; true on a dense model is a one-line error), checkpoints whose HF export loads
back in transformers with the trained experts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from prl_trainer_torch.export import export_checkpoint
from prl_trainer_torch.moe import METRICS
from prl_trainer_torch.sft import SFTRun
from prl_trainer_torch.trainer import TorchTrainer
from typer.testing import CliRunner

from prl.cli.main import app
from prl.config.errors import ConfigError

ROUTER = "model.layers.{}.mlp.gate.weight"
EXPERTS = "model.layers.{}.mlp.experts.gate_up_proj"
LAYERS = range(4)


@pytest.fixture(scope="session")
def tiny_moe_model(tmp_path_factory) -> Path:
    """The tiny-moe preset: Qwen3-MoE, 4 layers of 8 experts, top-2 (a fixture here, not in
    conftest.py, whose every edit re-measures the modules its tests guard under mutation)."""
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-moe", "tiny-moe", seed=0)


def _with_model(cfg, **fields):
    cfg.model = type(cfg.model).model_validate({**cfg.model.model_dump(), **fields})
    return cfg


def _weights(hf) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in hf.state_dict().items()}


def _metric_rows(run_dir: Path) -> dict[int, dict]:
    lines = (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines) if r.get("producer") == "trainer" and "optim/lr" in r}


def _sft(sft_config, tmp_path, model, data, **model_fields) -> tuple[dict, dict, dict[int, dict]]:
    cfg = _with_model(sft_config(tmp_path, model, data, max_steps=3, monitors={"file": {}}, ckpt={}), **model_fields)
    run = SFTRun(cfg)
    before = _weights(run.hf)
    try:
        run.train()
        after = _weights(run.hf)
    finally:
        run.close()
    return before, after, _metric_rows(tmp_path / "outputs" / "t")


def test_sft_trains_the_router_by_default_and_logs_moe_metrics_every_step(
    tmp_path, tiny_moe_model, reverse_data, sft_config
):
    before, after, rows = _sft(sft_config, tmp_path, tiny_moe_model, reverse_data[0])
    assert sorted(rows) == [1, 2, 3]
    for step, row in rows.items():
        for key in METRICS:
            assert key in row and math.isfinite(row[key]), (step, key)
        assert row["max_vio/max"] >= row["max_vio/mean"] >= 0
        assert row["expert_load/max_mean/mean"] == pytest.approx(row["max_vio/mean"] + 1)
        assert 0 <= row["expert_load/cold_frac/mean"] <= row["expert_load/cold_frac/max"] <= 1 - 2 / 8
        assert 2 / 8 < row["routing_confidence/mean"] <= 1
    assert rows[3]["loss/mean"] < rows[1]["loss/mean"]
    for i in LAYERS:
        assert not torch.equal(before[ROUTER.format(i)], after[ROUTER.format(i)]), i
        assert not torch.equal(before[EXPERTS.format(i)], after[EXPERTS.format(i)]), i
    # the trained experts and router survive checkpoint and export into an HF directory
    from transformers import AutoModelForCausalLM

    out = export_checkpoint(tmp_path / "outputs" / "t" / "checkpoints" / "step_3", tmp_path / "hf", dtype="float32")
    loaded = AutoModelForCausalLM.from_pretrained(out)
    assert type(loaded).__name__ == "Qwen3MoeForCausalLM"
    for name, value in loaded.state_dict().items():
        torch.testing.assert_close(value, after[name], msg=name)


def test_sft_with_frozen_router_keeps_it(tmp_path, tiny_moe_model, reverse_data, sft_config):
    before, after, rows = _sft(sft_config, tmp_path, tiny_moe_model, reverse_data[0], freeze_moe_router=True)
    for i in LAYERS:
        assert torch.equal(before[ROUTER.format(i)], after[ROUTER.format(i)]), i
        assert not torch.equal(before[EXPERTS.format(i)], after[EXPERTS.format(i)]), i
    assert all(key in rows[3] for key in METRICS)


def test_sft_resume_on_moe_is_exact(tmp_path, tiny_moe_model, reverse_data, sft_config):
    """Weights (experts and routers), optimizer state and data cursor all come back: a run
    split at step 2 logs the same losses and routing as one that never stopped."""
    common = {"monitors": {"file": {}}, "ckpt": {}, "data": {"batch_size": 2}}
    for name, stops in (("full", (4,)), ("half", (2, 4))):
        for i, steps in enumerate(stops):
            resume = {"resume": {}} if i else {}
            cfg = sft_config(
                tmp_path, tiny_moe_model, reverse_data[0], max_steps=steps, run={"name": name}, **common, **resume
            )
            assert TorchTrainer.run_sft(cfg) == 0
    full, half = (_metric_rows(tmp_path / "outputs" / n) for n in ("full", "half"))
    assert sorted(half) == [1, 2, 3, 4]
    for step in (3, 4):
        for key in ("loss/mean", *METRICS):
            assert half[step][key] == full[step][key], (step, key)


def test_dense_models_log_no_moe_metrics(tmp_path, tiny_model, reverse_data, sft_config):
    _, _, rows = _sft(sft_config, tmp_path, tiny_model, reverse_data[0])
    assert rows and not any(key in row for row in rows.values() for key in METRICS)


def test_freezing_the_router_of_a_dense_model_is_one_line(tmp_path, tiny_model, tiny_moe_model, sft_config):
    argv = ["sft", "--data.type", "fake", "--output-dir", str(tmp_path), "--dry-run", "--model.name"]
    res = CliRunner().invoke(app, [*argv, str(tiny_model), "--model.freeze-moe-router", "true"])
    assert res.exit_code == 2, res.output
    (line,) = [x for x in res.output.strip().splitlines() if "freeze_moe_router" in x]
    assert f"--model.freeze_moe_router: {tiny_model} has no MoE router" in line and "Traceback" not in res.output
    for model, value in ((tiny_moe_model, "true"), (tiny_model, "false"), (tiny_model, "auto")):
        res = CliRunner().invoke(app, [*argv, str(model), "--model.freeze-moe-router", value])
        assert res.exit_code == 0, (model, value, res.output)
    # the trainer checks the loaded model too (``prl trainer @ file`` skips the CLI's check)
    cfg = _with_model(sft_config(tmp_path, tiny_model, "unused", data={"type": "fake"}), freeze_moe_router=True)
    with pytest.raises(ConfigError, match=f"^model.freeze_moe_router: {tiny_model} has no MoE router$"):
        TorchTrainer.run_sft(cfg)


# --- RL ----------------------------------------------------------------------------------

PROMPT = [256, 10, 20, 30, 40, 257]


def _write_batches(run_dir: Path, steps: range) -> None:
    from prl.orchestrator.packing import pack
    from prl.orchestrator.transport import write_batch
    from prl.types import TrainingSample

    def sample(completion: list[int], advantage: float) -> TrainingSample:
        mask = [False] * len(PROMPT) + [True] * len(completion)
        n = len(mask)
        return TrainingSample(
            input_ids=PROMPT + completion,
            loss_mask=mask,
            advantages=[advantage if x else 0.0 for x in mask],
            inference_logprobs=[-math.log(320) if x else 0.0 for x in mask],
            temperature=1.0,
            rl_weights=[1.0 if x else 0.0 for x in mask],
            ce_weights=[0.0] * n,
            ref_kl_weights=[0.0] * n,
            env_name="alpha",
        )

    samples = [sample([65, 66, 67, 258], 1.0), sample([90, 91, 92, 258], -1.0)]
    for step in steps:
        write_batch(run_dir, step, pack(samples, seq_len=24, ranks=1))


def _rl(rl_config, tmp_path, model, weight_consumer, **model_fields) -> tuple[dict, dict, dict[int, dict]]:
    pytest.importorskip("prl_weights_filesystem")
    pytest.importorskip("prl_loss_ipo")
    from prl_trainer_torch.rl import RLRun

    cfg = _with_model(rl_config(tmp_path, model), **model_fields)
    run_dir = tmp_path / "outputs" / "rl"
    _write_batches(run_dir, range(1, 3))
    run = RLRun(cfg)
    before = _weights(run.hf)
    consumer = weight_consumer(run.run_dir, [0, 1, 2])
    consumer.start()
    try:
        run.train()
    finally:
        run.close()
    consumer.join(30)
    assert consumer.error is None, consumer.error
    return before, consumer.weights[2], _metric_rows(run_dir)


def test_rl_freezes_the_router_by_default(tmp_path, tiny_moe_model, weight_consumer, rl_config):
    from safetensors.torch import load_file

    before, published, rows = _rl(rl_config, tmp_path, tiny_moe_model, weight_consumer)
    for i in LAYERS:
        assert torch.equal(before[ROUTER.format(i)], published[ROUTER.format(i)]), i
    # published in the checkpoint layout, one tensor per expert: what vLLM (and any reader of
    # HF checkpoints) loads, and what its weight check compares with the served checkpoint
    base = load_file(tiny_moe_model / "model.safetensors")
    assert set(base) <= set(published) and not any(k.endswith("experts.gate_up_proj") for k in published)
    assert any(not torch.equal(base[k], published[k]) for k in base if ".experts." in k)
    assert sorted(rows) == [1, 2]
    for row in rows.values():
        assert all(key in row and math.isfinite(row[key]) for key in METRICS)


def test_rl_trains_the_router_when_told(tmp_path, tiny_moe_model, weight_consumer, rl_config):
    before, published, _ = _rl(rl_config, tmp_path, tiny_moe_model, weight_consumer, freeze_moe_router=False)
    assert any(not torch.equal(before[ROUTER.format(i)], published[ROUTER.format(i)]) for i in LAYERS)


@pytest.mark.slow
def test_two_fsdp_workers_match_one_on_moe(tmp_path, tiny_moe_model, sft_config):
    """FSDP2 shards each MoE decoder layer (experts and router with it); two ranks train the
    same weights as one, and the routing metrics, summed over ranks, are the same too."""
    from safetensors.torch import load_file

    fake = {"type": "fake", "seq_len": 32, "batch_size": 4}
    for name, workers in (("one", 1), ("two", 2)):
        cfg = sft_config(
            tmp_path, tiny_moe_model, "unused", run={"name": name}, num_workers=workers, data=fake, ckpt={},
            max_steps=2, monitors={"file": {}},
        )  # fmt: skip
        assert TorchTrainer.run_sft(cfg) == 0
    weights = []
    for name in ("one", "two"):
        step = tmp_path / "outputs" / name / "checkpoints" / "step_2"
        weights.append(load_file(export_checkpoint(step, tmp_path / f"hf-{name}", "float32") / "model.safetensors"))
    assert "model.layers.0.mlp.experts.7.gate_proj.weight" in weights[0]
    for key in weights[0]:
        torch.testing.assert_close(weights[1][key], weights[0][key], atol=2e-5, rtol=1e-4, msg=key)
    one, two = (_metric_rows(tmp_path / "outputs" / n) for n in ("one", "two"))
    for step in (1, 2):
        assert two[step]["expert_load/cold_frac/max"] == one[step]["expert_load/cold_frac/max"]
        for key in METRICS:
            assert two[step][key] == pytest.approx(one[step][key], rel=1e-6), (step, key)
