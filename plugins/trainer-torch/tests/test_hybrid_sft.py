"""SFT on the Qwen3.5 hybrid preset: packed rows train the Gated DeltaNet layers, and the
checkpoint exports to a directory transformers loads with the trained weights."""

from __future__ import annotations

import pytest
import torch
from prl_trainer_torch import hybrid
from prl_trainer_torch.export import export_checkpoint
from prl_trainer_torch.sft import SFTRun


@pytest.fixture(scope="module")
def hybrid_model(tmp_path_factory):
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-qwen3.5", "tiny-qwen3.5", seed=0)


def test_sft_checkpoint_exports_to_transformers(tmp_path, hybrid_model, reverse_data, sft_config, monkeypatch):
    from transformers import AutoModelForCausalLM

    documents = []
    stock = hybrid.packed_forward

    def counting(mod, hidden, cu, *args):
        documents.append(cu.numel() - 1)
        return stock(mod, hidden, cu, *args)

    monkeypatch.setattr(hybrid, "packed_forward", counting)
    train, _ = reverse_data
    # 256-token rows hold several reverse-text documents each, so the step runs packed.
    cfg = sft_config(tmp_path, hybrid_model, train, max_steps=2, ckpt={}, data={"seq_len": 256, "batch_size": 2})
    run = SFTRun(cfg)
    try:
        assert run.policy.hybrid
        run.train()
        trained = {k: v.detach().clone() for k, v in run.hf.state_dict().items()}
    finally:
        run.close()
    # Every linear layer of every micro-batch ran packed, several documents at a time.
    assert documents and min(documents) > 1
    out = export_checkpoint(tmp_path / "outputs" / "t" / "checkpoints" / "step_2", tmp_path / "hf", dtype="float32")
    loaded = AutoModelForCausalLM.from_pretrained(out)
    assert type(loaded).__name__ == "Qwen3_5ForCausalLM"
    for name, value in loaded.state_dict().items():
        torch.testing.assert_close(value, trained[name], msg=name)
    base = AutoModelForCausalLM.from_pretrained(hybrid_model).state_dict()
    for name in ("model.layers.0.linear_attn.conv1d.weight", "model.layers.1.linear_attn.A_log"):
        assert not torch.equal(base[name], trained[name]), f"{name} did not train"


def _cli_sft(out, model, data, *flags: str):
    import json

    from typer.testing import CliRunner

    from prl.cli.main import app

    argv = ["sft", "--output-dir", str(out), "--run.name", "h", "--model.name", str(model), "--data.name", str(data),
            "--data.seq-len", "256", "--data.batch-size", "4", "--data.shuffle", "false", "--max-steps", "2",
            "--renderer.name", "auto", *flags]  # fmt: skip
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (out / "h" / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    return [r["loss/mean"] for r in rows if "loss/mean" in r]


@pytest.mark.slow  # two torchrun launches
def test_two_fsdp_ranks_train_the_hybrid_model_as_one(tmp_path, hybrid_model, reverse_data):
    """FSDP2 over two gloo ranks (torchrun): each rank packs its share of the batch through the
    Gated DeltaNet layers, and the step's loss is the one-rank run's."""
    one = _cli_sft(tmp_path / "one", hybrid_model, reverse_data[0])
    two = _cli_sft(tmp_path / "two", hybrid_model, reverse_data[0], "--num-workers", "2")
    assert len(one) == len(two) == 2 and one[1] < one[0]
    for x, y in zip(one, two, strict=True):
        assert abs(x - y) < 1e-4 * abs(x), (one, two)
