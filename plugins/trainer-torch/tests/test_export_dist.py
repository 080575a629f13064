"""``prl export --num-workers N``: torchrun ranks that each hold 1/N of the model write the
same weights as the one-process export, as a sharded safetensors directory."""

from __future__ import annotations

import json

import pytest
import torch
import typer
from prl_trainer_torch.cli import add_commands
from prl_trainer_torch.export_dist import owners
from prl_trainer_torch.trainer import TorchTrainer
from typer.testing import CliRunner


def _app() -> typer.Typer:
    app = typer.Typer()
    add_commands(app)
    return app


def test_names_are_spread_evenly_over_ranks():
    sizes = {"a": 100, "b": 60, "c": 50, "d": 10}
    assert owners(sizes, 2) == {"a": 0, "b": 1, "c": 1, "d": 0}
    assert set(owners(sizes, 1).values()) == {0}


@pytest.mark.slow
def test_two_rank_export_matches_one_process_export(tmp_path, tiny_model, sft_config):
    from transformers import AutoModelForCausalLM

    fake = {"type": "fake", "seq_len": 32, "batch_size": 4}
    cfg = sft_config(tmp_path, tiny_model, "unused", data=fake, ckpt={}, max_steps=2)
    assert TorchTrainer.run_sft(cfg) == 0
    step = tmp_path / "outputs" / "t" / "checkpoints" / "step_2"
    runner, app = CliRunner(), _app()
    one = runner.invoke(app, ["export", str(step), str(tmp_path / "one"), "--dtype", "float32"])
    assert one.exit_code == 0, one.output
    two = runner.invoke(app, ["export", str(step), str(tmp_path / "two"), "--dtype", "float32", "--num-workers", "2"])
    assert two.exit_code == 0, two.output
    index = json.loads((tmp_path / "two" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    a = AutoModelForCausalLM.from_pretrained(tmp_path / "one").state_dict()
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "two").state_dict()
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=0, msg=key)
    # and it is the trained model, not the initial one
    init = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    assert any(not torch.equal(init[k], b[k]) for k in b)
