"""LoRA on an MoE model (tiny-moe: Qwen3-MoE, 8 fused experts per layer): the default target
modules adapt the attention projections and leave experts and routers frozen; target modules
that name the experts, which LoRA cannot adapt, are refused with one line when the config is
resolved (``prl sft`` and ``prl rl --dry-run``, exit code 2) and by the trainer itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from prl_trainer_torch.config import ModelTrainConfig, check_lora_experts
from prl_trainer_torch.lora import LoraLinear
from prl_trainer_torch.sft import SFTRun
from typer.testing import CliRunner

from prl.cli.main import app
from prl.config.errors import ConfigError
from prl.config.policy import LORA_TARGETS
from prl.config.sections import LoraConfig

ROOT = Path(__file__).resolve().parents[3]
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
REFUSAL = (
    "lora.target_modules: {names}: LoRA cannot adapt the experts of the MoE model {model} (fused experts are "
    "not supported); it adapts the attention projections (and dense MLP layers if any): list attention "
    "projections only (q_proj, k_proj, v_proj, o_proj), or leave target_modules unset"
)


@pytest.fixture(scope="session")
def tiny_moe_model(tmp_path_factory) -> Path:
    """The tiny-moe preset (a fixture here, not in conftest.py: see test_moe_train.py)."""
    from prl_model_init import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-moe", "tiny-moe", seed=0)


@pytest.mark.parametrize(
    ("targets", "names"),
    [
        (["gate_up_proj"], "gate_up_proj"),
        (["down_proj"], "down_proj"),
        (["experts"], "experts"),
        (["q_proj", "gate_proj", "up_proj"], "gate_proj, up_proj"),
        (["w1", "w2", "w3", "o_proj"], "w1, w2, w3"),
        ([*LORA_TARGETS, "experts"], "down_proj, experts, gate_proj, up_proj"),
    ],
)
def test_target_modules_naming_experts_are_refused_on_an_moe_model(targets, names):
    with pytest.raises(ValueError) as info:
        check_lora_experts(targets, 8, "m")
    assert str(info.value) == REFUSAL.format(names=names, model="m")
    check_lora_experts(targets, 0, "m")  # a dense model: its MLP projections are linear layers


@pytest.mark.parametrize("targets", [LORA_TARGETS, LORA_TARGETS[::-1], ["q_proj", "v_proj"], ["o_proj"]])
def test_the_default_targets_and_attention_only_targets_are_accepted(targets):
    check_lora_experts(list(targets), 8, "m")


def test_check_model_reads_the_experts_from_config_json(tmp_path):
    def model(config: dict, targets: list[str] | None) -> ModelTrainConfig:
        (tmp_path / "config.json").write_text(json.dumps(config))
        lora = None if targets is None else LoraConfig(target_modules=targets)
        return ModelTrainConfig(name="m", lora=lora)

    with pytest.raises(ValueError, match="^lora.target_modules: down_proj: LoRA cannot adapt"):
        model({"num_experts": 8}, ["down_proj"]).check_model(str(tmp_path))
    # Mixtral's key, and a multimodal model's language part
    for config in ({"num_local_experts": 8}, {"text_config": {"n_routed_experts": 4}}):
        with pytest.raises(ValueError, match="^lora.target_modules: w2: "):
            model(config, ["w2"]).check_model(str(tmp_path))
    model({"num_experts": 8}, None).check_model(str(tmp_path))
    model({"num_experts": 8}, list(LORA_TARGETS)).check_model(str(tmp_path))
    model({"intermediate_size": 512}, ["down_proj"]).check_model(str(tmp_path))


def _cli(*argv: str):
    return CliRunner().invoke(app, list(argv))


def test_prl_sft_and_rl_dry_runs_refuse_expert_targets_with_one_line(tmp_path, tiny_model, tiny_moe_model):
    sft = ["sft", "--data.type", "fake", "--output-dir", str(tmp_path), "--dry-run", "--model.name"]
    res = _cli(*sft, str(tiny_moe_model), "--model.lora.target_modules", '["q_proj", "gate_up_proj"]')
    assert res.exit_code == 2, res.output
    (line,) = [x for x in res.output.strip().splitlines() if "target_modules" in x]
    expected = REFUSAL.format(names="gate_up_proj", model=tiny_moe_model)
    assert line == f"Config file error: --model.{expected}" and "Traceback" not in res.output
    # the default targets, attention-only targets, and expert names on a dense model resolve
    for model, extra in (
        (tiny_moe_model, ["--model.lora.rank", "4"]),
        (tiny_moe_model, ["--model.lora.target_modules", '["q_proj", "o_proj"]']),
        (tiny_model, ["--model.lora.target_modules", '["gate_proj", "down_proj"]']),
    ):
        res = _cli(*sft, str(model), *extra)
        assert res.exit_code == 0, (model, extra, res.output)
    # prl rl: [model.lora] is shared, the trainer's copy is the one checked
    rl = ["rl", "@", str(ROOT / "examples" / "reverse-text" / "rl.toml"), "--output-dir", str(tmp_path), "--dry-run"]
    res = _cli(*rl, "--model.name", str(tiny_moe_model), "--model.lora.target_modules", '["experts"]')
    assert res.exit_code == 2, res.output
    (line,) = [x for x in res.output.strip().splitlines() if "target_modules" in x]
    assert line == "Config file error: --trainer.model." + REFUSAL.format(names="experts", model=tiny_moe_model)
    res = _cli(*rl, "--model.name", str(tiny_moe_model), "--model.lora.rank", "4")
    assert res.exit_code == 0, res.output


def _weights(hf) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in hf.state_dict().items()}


def test_default_lora_sft_on_moe_adapts_attention_only_and_keeps_experts_frozen(
    tmp_path, tiny_moe_model, reverse_data, sft_config
):
    cfg = sft_config(tmp_path, tiny_moe_model, reverse_data[0], max_steps=2, optim={"lr": 2e-2})
    cfg.model.lora = LoraConfig(rank=4, alpha=8.0)
    run = SFTRun(cfg)
    layers = run.hf.config.num_hidden_layers
    assert sorted(run.adapter.modules) == sorted(
        f"model.layers.{i}.self_attn.{p}" for i in range(layers) for p in ATTENTION
    )
    assert run.adapter.config["target_modules"] == sorted(ATTENTION)
    trained = {n for n, p in run.hf.named_parameters() if p.requires_grad}
    assert trained and all(".lora_" in n and ".self_attn." in n for n in trained)
    assert not any(isinstance(m, LoraLinear) for n, m in run.hf.named_modules() if ".mlp" in n)
    before = _weights(run.hf)
    try:
        run.train()
        after = _weights(run.hf)
    finally:
        run.close()
    for name, value in before.items():
        if ".lora_B" in name:
            assert not torch.equal(value, after[name]), name  # the adapter learned
        elif ".lora_" not in name:
            assert torch.equal(value, after[name]), name  # experts, routers, attention: frozen
    assert any(k.endswith("mlp.experts.gate_up_proj") for k in before)


def test_the_trainer_refuses_expert_targets_itself(tmp_path, tiny_moe_model, reverse_data, sft_config):
    """``prl trainer @ file`` skips the CLI's check: the trainer checks the loaded model."""
    cfg = sft_config(tmp_path, tiny_moe_model, reverse_data[0], max_steps=1)
    cfg.model.lora = LoraConfig(target_modules=["q_proj", "down_proj"])
    expected = REFUSAL.format(names="down_proj", model=tiny_moe_model)
    with pytest.raises(ConfigError, match=f"^{re.escape('model.' + expected)}$"):
        SFTRun(cfg)


def test_ep_is_checked_against_the_ranks_num_train_gpus_gives(tmp_path, tiny_moe_model, monkeypatch):
    """``[deployment] num_train_gpus`` alone sets the trainer ranks (one per GPU): ``ep`` is
    checked against them at resolve time, not against the default single worker."""
    from prl.gpus import COUNT_ENV

    monkeypatch.setenv(COUNT_ENV, "4")  # a 4-GPU machine as far as the placement checks go
    rl = ["rl", "@", str(ROOT / "examples" / "reverse-text" / "rl.toml"), "--output-dir", str(tmp_path), "--dry-run"]
    rl += ["--model.name", str(tiny_moe_model), "--deployment.num-infer-gpus", "1"]
    res = _cli(*rl, "--trainer.model.ep", "2", "--deployment.num-train-gpus", "2")
    assert res.exit_code == 0, res.output
    resolved = {p.stem: json.loads(p.read_text()) for p in tmp_path.rglob("resolved/*.json")}
    assert resolved["trainer"]["num_workers"] == resolved["orchestrator"]["num_train_workers"] == 2
    res = _cli(*rl, "--trainer.model.ep", "2", "--deployment.num-train-gpus", "3")
    assert res.exit_code == 2
    assert res.output.strip() == "Config file error: model.ep: 2 does not divide the 3 trainer workers (num_workers)"
