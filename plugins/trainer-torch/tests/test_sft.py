"""End-to-end SFT on the tiny model: learning, exact resume, retention, export, torchrun."""

from __future__ import annotations

import json
from typing import ClassVar, Literal

import pytest
import torch
from prl_trainer_torch.checkpoint import complete_steps
from prl_trainer_torch.export import export_checkpoint
from prl_trainer_torch.sft import SFTRun
from prl_trainer_torch.trainer import TorchTrainer

from prl.contracts.monitor import Monitor, MonitorConfig


class Recorder(Monitor):
    """Keeps every logged row in memory (what a file monitor would write)."""

    key = "record"
    rows: ClassVar[list] = []

    class Config(MonitorConfig):
        path: Literal["memory"] = "memory"
        """Where rows go."""

    def log(self, metrics, step):
        Recorder.rows.append((step, self.producer, dict(metrics)))


class _RecorderPlugin:
    from prl import hookimpl

    @staticmethod
    @hookimpl
    def prl_register_monitors():
        return [Recorder]


@pytest.fixture
def recorder(register_plugin):
    register_plugin(_RecorderPlugin, "trainer-torch-test-recorder")
    Recorder.rows = []
    return Recorder


def losses(rows) -> dict[int, float]:
    return {s: m["loss/mean"] for s, _, m in rows if "loss/mean" in m}


def test_sft_learns_and_logs_metrics(tmp_path, tiny_model, reverse_data, recorder, sft_config):
    train, val = reverse_data
    cfg = sft_config(
        tmp_path,
        tiny_model,
        train,
        max_steps=6,
        monitors={"record": {}},
        val={"interval": 3, "data": {"name": str(val), "seq_len": 64, "batch_size": 4, "shuffle": False}},
    )
    assert TorchTrainer.run_sft(cfg) == 0
    rows = recorder.rows
    assert all(p == "trainer" for _, p, _ in rows)
    loss = losses(rows)
    assert list(loss) == [1, 2, 3, 4, 5, 6]
    assert loss[6] < loss[1] - 1.0
    last = rows[-1][2]
    for key in (
        "loss/perplexity",
        "optim/lr",
        "optim/grad_norm",
        "perf/throughput",
        "perf/peak_memory",
        "time/step",
        "progress/num_tokens",
        "val/loss",
    ):
        assert key in last, key
    vals = [m["val/loss"] for _, _, m in rows if "val/loss" in m]
    assert len(vals) == 2 and vals[1] < vals[0]


def test_resume_is_exact(tmp_path, tiny_model, reverse_data, recorder, sft_config):
    train, _ = reverse_data
    common = {"monitors": {"record": {}}, "scheduler": {"type": "constant"}}
    sft_config(tmp_path, tiny_model, train, max_steps=4, run={"name": "full"}, **common)
    TorchTrainer.run_sft(sft_config(tmp_path, tiny_model, train, max_steps=4, run={"name": "full"}, **common))
    full = losses(recorder.rows)
    recorder.rows = []
    half = sft_config(tmp_path, tiny_model, train, max_steps=2, run={"name": "half"}, ckpt={}, **common)
    TorchTrainer.run_sft(half)
    resumed = sft_config(tmp_path, tiny_model, train, max_steps=4, run={"name": "half"}, ckpt={}, resume={}, **common)
    TorchTrainer.run_sft(resumed)
    split = losses(recorder.rows)
    assert list(split) == [1, 2, 3, 4]
    assert split == full  # bit-identical on CPU: weights, optimizer, data cursor all restored
    assert complete_steps(tmp_path / "outputs" / "half" / "checkpoints") == [2, 4]


def test_fork_with_cosine_matches_uninterrupted_run(tmp_path, tiny_model, reverse_data, recorder, sft_config):
    train, _ = reverse_data
    common = {"monitors": {"record": {}}, "scheduler": {"type": "cosine", "warmup_steps": 1}, "max_steps": 4}
    TorchTrainer.run_sft(sft_config(tmp_path, tiny_model, train, run={"name": "a"}, ckpt={"interval": 2}, **common))
    full = losses(recorder.rows)
    recorder.rows = []
    src = tmp_path / "outputs" / "a" / "checkpoints" / "step_2"
    TorchTrainer.run_sft(sft_config(tmp_path, tiny_model, train, run={"name": "b"}, resume={"dir": str(src)}, **common))
    assert losses(recorder.rows) == {3: full[3], 4: full[4]}


def test_retention_and_missing_resume_step(tmp_path, tiny_model, reverse_data, sft_config):
    train, _ = reverse_data
    ckpt = {"interval": 1, "keep_last": 2, "keep_interval": 3}
    TorchTrainer.run_sft(sft_config(tmp_path, tiny_model, train, max_steps=5, ckpt=ckpt, data={"batch_size": 1}))
    root = tmp_path / "outputs" / "t" / "checkpoints"
    assert complete_steps(root) == [3, 4, 5]
    assert (root / "step_5" / "trainer" / "dataloader" / "rank_0.pt").exists()
    with pytest.raises(FileNotFoundError, match="step 2"):
        TorchTrainer.run_sft(sft_config(tmp_path, tiny_model, train, max_steps=6, resume={"step": 2}))


def test_export_loads_in_transformers_with_trained_weights(tmp_path, tiny_model, reverse_data, sft_config):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    train, _ = reverse_data
    run = SFTRun(sft_config(tmp_path, tiny_model, train, max_steps=2, ckpt={}))
    try:
        run.train()
        trained = {k: v.detach().clone() for k, v in run.hf.state_dict().items()}
    finally:
        run.close()
    out = export_checkpoint(tmp_path / "outputs" / "t" / "checkpoints" / "step_2", tmp_path / "hf", dtype="float32")
    loaded = AutoModelForCausalLM.from_pretrained(out)
    AutoTokenizer.from_pretrained(out)
    for name, value in loaded.state_dict().items():
        torch.testing.assert_close(value, trained[name], msg=name)
    base = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    assert not torch.equal(base["model.layers.0.mlp.up_proj.weight"], trained["model.layers.0.mlp.up_proj.weight"])


@pytest.mark.slow
def test_two_workers_under_torchrun_match_one(tmp_path, tiny_model, sft_config):
    from safetensors.torch import load_file

    fake = {"type": "fake", "seq_len": 32, "batch_size": 4}
    for name, workers in (("one", 1), ("two", 2)):
        cfg = sft_config(
            tmp_path, tiny_model, "unused", run={"name": name}, num_workers=workers, data=fake, ckpt={}, max_steps=2
        )
        assert TorchTrainer.run_sft(cfg) == 0
        assert complete_steps(tmp_path / "outputs" / name / "checkpoints") == [2]  # rank 0 marked it
    weights = []
    for name in ("one", "two"):
        out = export_checkpoint(
            tmp_path / "outputs" / name / "checkpoints" / "step_2", tmp_path / f"hf-{name}", "float32"
        )
        weights.append(load_file(out / "model.safetensors"))
    for key in weights[0]:
        torch.testing.assert_close(weights[1][key], weights[0][key], atol=2e-5, rtol=1e-4, msg=key)


def test_mixed_splits_report_their_ratios(tmp_path, tiny_model, reverse_data, recorder, sft_config):
    import datasets

    train, _ = reverse_data
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    parts = datasets.DatasetDict(
        {
            "easy": datasets.Dataset.from_list(rows[:200]),
            "hard": datasets.Dataset.from_list(rows[200:]),
        }
    )
    parts.save_to_disk(str(tmp_path / "mix"))
    cfg = sft_config(
        tmp_path,
        tiny_model,
        tmp_path / "mix",
        max_steps=3,
        monitors={"record": {}},
        data={"splits": ["easy", "hard"], "probabilities": [0.8, 0.2], "batch_size": 8},
    )
    assert TorchTrainer.run_sft(cfg) == 0
    last = recorder.rows[-1][2]
    for kind in ("samples", "tokens"):
        easy, hard = last[f"progress/easy/ratio_{kind}"], last[f"progress/hard/ratio_{kind}"]
        assert easy + hard == pytest.approx(1.0)
        assert easy > hard > 0
