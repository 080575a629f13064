"""Trainer knobs under ``[model]``: matmul precision, manual garbage collection, the
data-parallel mesh (dp_replicate x dp_shard), and tensor/context parallelism refused."""

from __future__ import annotations

import gc
import json

import pytest
import torch
from prl_trainer_torch.checkpoint import complete_steps
from prl_trainer_torch.export import export_checkpoint
from prl_trainer_torch.trainer import TorchTrainer
from typer.testing import CliRunner

from prl.cli.main import app

FAKE = {"type": "fake", "seq_len": 32, "batch_size": 4}


def _with(model, **fields):
    """``[model]`` of a built config with ``fields`` set, validated again."""
    return type(model).model_validate({**model.model_dump(), **fields})


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model.tp", "2"], "--model: Value error, tp = 2: tensor parallelism is not supported yet"),
        (["--model.cp", "2"], "--model: Value error, cp = 2: context parallelism is not supported yet"),
        (["--model.dp-replicate", "2"], "model.dp_replicate (2) x model.dp_shard (-1) must equal the number of"),
        (["--num-workers", "4", "--model.dp-shard", "3"], "must equal the number of workers (4)"),
    ],
)
def test_unsupported_or_mismatched_parallelism_is_a_usage_error(tmp_path, tiny_model, flags, message):
    argv = ["sft", "--model.name", str(tiny_model), "--data.type", "fake", "--output-dir", str(tmp_path), "--dry-run"]
    result = CliRunner().invoke(app, [*argv, *flags])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_matmul_precision_and_manual_gc(tmp_path, tiny_model, sft_config):
    before = torch.get_float32_matmul_precision()
    try:
        cfg = sft_config(
            tmp_path,
            tiny_model,
            "unused",
            data=FAKE,
            max_steps=4,
            monitors={"file": {}},
        )
        cfg.model = _with(cfg.model, matmul_precision="medium", gc={"interval": 2})
        assert TorchTrainer.run_sft(cfg) == 0
        precision = torch.get_float32_matmul_precision()
    finally:
        torch.set_float32_matmul_precision(before)
    assert precision == "medium"
    rows = (tmp_path / "outputs" / "t" / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()
    gc_rows = {r["step"]: r["time/gc"] for r in map(json.loads, rows) if "time/gc" in r}
    # collected at steps 2 and 4 only; automatic collection is back on after the run
    assert set(gc_rows) == {1, 2, 3, 4} and gc_rows[1] == gc_rows[3] == 0.0 and gc_rows[2] > 0 and gc_rows[4] > 0
    assert gc.isenabled()


@pytest.mark.slow
def test_replicated_mesh_matches_one_worker(tmp_path, tiny_model, sft_config):
    """HSDP with 2 replicas of 1 shard trains the same weights as one worker (gloo on CPU)."""
    from safetensors.torch import load_file

    runs = (("one", 1, {}), ("hsdp", 2, {"dp_replicate": 2, "dp_shard": 1}))
    for name, workers, dp in runs:
        cfg = sft_config(
            tmp_path, tiny_model, "unused", run={"name": name}, num_workers=workers, data=FAKE, ckpt={}, max_steps=2
        )
        cfg.model = _with(cfg.model, **dp)
        assert TorchTrainer.run_sft(cfg) == 0
        assert complete_steps(tmp_path / "outputs" / name / "checkpoints") == [2]
    weights = []
    for name, _, _ in runs:
        step = tmp_path / "outputs" / name / "checkpoints" / "step_2"
        weights.append(load_file(export_checkpoint(step, tmp_path / f"hf-{name}", "float32") / "model.safetensors"))
    for key in weights[0]:
        torch.testing.assert_close(weights[1][key], weights[0][key], atol=2e-5, rtol=1e-4, msg=key)
