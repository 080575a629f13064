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


def _layer_calls_and_grads(tiny_model, ac: bool, freq: int) -> tuple[list[int], dict]:
    from prl_trainer_torch.model import Dist, decoder_layers, load_hf_model, parallelize

    torch.manual_seed(0)
    hf = load_hf_model(str(tiny_model), torch.float32, "sdpa")
    policy = parallelize(hf, Dist(0, 1, 0, torch.device("cpu")), ac, compile=False, ac_freq=freq)
    policy.train()
    calls = [0] * len(decoder_layers(hf))
    for i, layer in enumerate(decoder_layers(hf)):
        layer.register_forward_pre_hook(lambda *_, i=i: calls.__setitem__(i, calls[i] + 1))
    ids = torch.randint(0, 256, (1, 12))
    logp, _ = policy(ids, torch.arange(12)[None], torch.roll(ids, -1))
    logp.sum().backward()
    return calls, {n: p.grad.clone() for n, p in hf.named_parameters() if p.grad is not None}


def test_activation_checkpointing_freq_recomputes_every_nth_layer_with_the_same_gradients(tiny_model):
    calls, grads = _layer_calls_and_grads(tiny_model, ac=True, freq=2)
    # a checkpointed layer runs again in the backward pass; the others keep their activations
    assert calls == [2 if i % 2 == 0 else 1 for i in range(len(calls))] and len(calls) >= 2
    all_calls, all_grads = _layer_calls_and_grads(tiny_model, ac=True, freq=1)
    none_calls, none_grads = _layer_calls_and_grads(tiny_model, ac=False, freq=2)
    assert all_calls == [2] * len(calls) and none_calls == [1] * len(calls)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, none_grads[name])
        torch.testing.assert_close(grad, all_grads[name])
