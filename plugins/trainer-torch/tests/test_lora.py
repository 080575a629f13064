"""LoRA in the torch trainer: the layer, SFT with an adapter (learning, checkpoint, resume),
the adapter a RL step publishes, and ``prl export`` of a LoRA checkpoint."""

from __future__ import annotations

import json

import pytest
import torch
import typer
from prl_trainer_torch.checkpoint import complete_steps
from prl_trainer_torch.cli import add_commands
from prl_trainer_torch.config import ModelTrainConfig, OptimConfig
from prl_trainer_torch.lora import (
    Adapter,
    LoraLinear,
    adapter_config,
    adapter_tensors,
    apply_lora,
    maybe_adapter,
    merge_lora,
)
from prl_trainer_torch.optim import build_optimizer
from prl_trainer_torch.sft import SFTRun
from safetensors.torch import load_file
from typer.testing import CliRunner

from prl.config.errors import ConfigError
from prl.config.sections import LoraConfig

LORA = {"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj", "up_proj"]}


def _model(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


def _logits(hf, ids):
    with torch.no_grad():
        return hf(input_ids=ids).logits


def _ids(hf, n=12):
    return torch.randint(0, hf.config.vocab_size, (2, n), generator=torch.Generator().manual_seed(0))


def test_fresh_adapter_computes_the_base_model_and_only_it_trains(tiny_model):
    base, hf = _model(tiny_model), _model(tiny_model)
    modules = apply_lora(hf, LoraConfig(**LORA))
    assert len(modules) == 3 * hf.config.num_hidden_layers
    assert all(isinstance(dict(hf.named_modules())[m], LoraLinear) for m in modules)
    ids = _ids(hf)
    torch.testing.assert_close(_logits(hf, ids), _logits(base, ids), rtol=0, atol=0)
    # The optimizer holds exactly the adapter; a backward leaves the base without gradients.
    opt = build_optimizer(hf.parameters(), OptimConfig(lr=1e-2), 0.0)
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    adapter = {id(p) for n, p in hf.named_parameters() if ".lora_" in n}
    assert held == adapter and len(adapter) == 2 * len(modules)
    hf(input_ids=ids).logits.logsumexp(-1).mean().backward()
    for name, p in hf.named_parameters():
        assert (p.grad is not None) == (".lora_" in name), name
    assert any(float(p.grad.abs().sum()) > 0 for n, p in hf.named_parameters() if ".lora_B" in n)


def test_merged_weights_compute_what_the_adapted_model_computes(tiny_model):
    hf = _model(tiny_model)
    apply_lora(hf, LoraConfig(**LORA))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if ".lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    ids = _ids(hf)
    adapted = _logits(hf, ids)
    assert not torch.allclose(adapted, _logits(_model(tiny_model), ids), atol=1e-3)
    assert merge_lora(hf) == 3 * hf.config.num_hidden_layers
    assert not any(".lora_" in n for n, _ in hf.named_parameters())
    assert not any(isinstance(m, LoraLinear) for m in hf.modules())
    torch.testing.assert_close(_logits(hf, ids), adapted, rtol=1e-5, atol=1e-5)


def test_peft_names_and_unknown_targets(tiny_model):
    hf = _model(tiny_model)
    with pytest.raises(ConfigError, match=r"model.lora.target_modules: no linear layer is named any of \['qkv'\]"):
        apply_lora(hf, LoraConfig(target_modules=["qkv"]))
    apply_lora(hf, LoraConfig(**LORA))
    tensors = adapter_tensors(hf)
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    assert key in tensors and tensors[key].shape == (4, hf.config.hidden_size)
    assert all(k.startswith("base_model.model.") and ".lora_" in k for k in tensors)


def _lora_sft(tmp_path, tiny_model, train, sft_config, **kw):
    cfg = sft_config(tmp_path, tiny_model, train, **kw)
    cfg.model.lora = LoraConfig(**LORA)
    return cfg


def _losses(tmp_path, name):
    rows = (tmp_path / "outputs" / name / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss/mean"] for r in map(json.loads, rows) if "loss/mean" in r}


@pytest.mark.slow
def test_lora_sft_learns_checkpoints_the_adapter_and_resumes(tmp_path, tiny_model, reverse_data, sft_config):
    train, _ = reverse_data
    common = {"optim": {"lr": 2e-2}, "scheduler": {"type": "constant"}, "monitors": {"file": {}}, "ckpt": {}}
    run = SFTRun(_lora_sft(tmp_path, tiny_model, train, sft_config, max_steps=3, run={"name": "l"}, **common))
    try:
        run.train()
    finally:
        run.close()
    run = SFTRun(
        _lora_sft(tmp_path, tiny_model, train, sft_config, max_steps=6, run={"name": "l"}, resume={}, **common)
    )
    try:
        assert run.progress["step"] == 3  # resumed, not restarted
        run.train()
        trained = {k: v.detach().clone() for k, v in run.hf.state_dict().items()}
    finally:
        run.close()
    loss = _losses(tmp_path, "l")
    assert list(loss) == [1, 2, 3, 4, 5, 6] and loss[6] < loss[1] - 0.5
    root = tmp_path / "outputs" / "l" / "checkpoints"
    assert complete_steps(root) == [3, 6]
    cfg = json.loads((root / "step_6" / "trainer" / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and cfg["lora_alpha"] == 8.0 and cfg["target_modules"] == ["q_proj", "up_proj", "v_proj"]
    # The checkpoint holds the adapter only: far smaller than the frozen base.
    size = sum(f.stat().st_size for f in (root / "step_6" / "trainer").glob("*.distcp"))
    base = sum(p.numel() * 4 for k, p in trained.items() if ".lora_" not in k)
    assert size < base / 4
    # The frozen base really stayed as loaded.
    torch.testing.assert_close(
        trained["model.layers.0.mlp.up_proj.weight"],
        _model(tiny_model).state_dict()["model.layers.0.mlp.up_proj.weight"],
    )
    _check_export(tmp_path, tiny_model, root / "step_6", trained)


def _check_export(tmp_path, tiny_model, step_dir, trained):
    from transformers import AutoModelForCausalLM

    app = typer.Typer()
    add_commands(app)
    refused = CliRunner().invoke(app, ["export", str(step_dir), str(tmp_path / "no")])
    assert refused.exit_code == 2
    lines = [x for x in refused.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "is a LoRA checkpoint" in lines[0] and "--merge-lora" in lines[0]
    assert not (tmp_path / "no").exists()
    ok = CliRunner().invoke(
        app, ["export", str(step_dir), str(tmp_path / "merged"), "--merge-lora", "--dtype", "float32"]
    )
    assert ok.exit_code == 0, ok.output
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    adapted = _model(tiny_model)
    apply_lora(adapted, LoraConfig(**LORA))
    adapted.load_state_dict(trained)
    ids = _ids(adapted)
    torch.testing.assert_close(_logits(merged, ids), _logits(adapted, ids), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(_logits(merged, ids), _logits(_model(tiny_model), ids), atol=1e-3)
    # --dtype fp8 quantizes the merged weights: the same FP8 tensors as converting the merged export
    fp8 = CliRunner().invoke(app, ["export", str(step_dir), str(tmp_path / "fp8"), "--merge-lora", "--dtype", "fp8"])
    assert fp8.exit_code == 0, fp8.output
    via = CliRunner().invoke(app, ["convert", "to-fp8", str(tmp_path / "merged"), str(tmp_path / "via")])
    assert via.exit_code == 0, via.output
    a, b = (load_file(tmp_path / d / "model-00001-of-00001.safetensors") for d in ("fp8", "via"))
    assert a.keys() == b.keys() and any(t.dtype == torch.float8_e4m3fn for t in a.values())
    assert all(torch.equal(a[k].view(torch.uint8), b[k].view(torch.uint8)) for k in a)


def test_resume_refuses_a_checkpoint_of_the_other_kind(tmp_path, tiny_model, reverse_data, sft_config):
    train, _ = reverse_data
    run = SFTRun(sft_config(tmp_path, tiny_model, train, max_steps=1, ckpt={}))
    try:
        run.train()
    finally:
        run.close()
    with pytest.raises(ConfigError, match="holds full weights but \\[model.lora\\] is set"):
        SFTRun(_lora_sft(tmp_path, tiny_model, train, sft_config, max_steps=2, ckpt={}, resume={}))


def test_rl_trainer_publishes_the_adapter(tmp_path, tiny_model, rl_config, weight_consumer):
    from prl_trainer_torch.rl import RLRun

    cfg = rl_config(tmp_path, tiny_model)
    cfg.model.lora = LoraConfig(**LORA)
    run = RLRun(cfg)
    consumer = weight_consumer(run.run_dir, [])
    try:
        import threading

        got = {}

        def ack():
            got["dir"] = consumer.transport.receive(0, timeout=60)

        t = threading.Thread(target=ack)
        t.start()
        run.publish(0)
        t.join(60)
    finally:
        run.close()
    from pathlib import Path

    from safetensors.torch import load_file

    step = Path(got["dir"])
    assert not (step / "model.safetensors").exists()
    tensors = load_file(str(step / "adapter_model.safetensors"))
    assert len(tensors) == 2 * 3 * run.hf.config.num_hidden_layers
    assert json.loads((step / "adapter_config.json").read_text())["r"] == 4


class _TwoLayers(torch.nn.Module):
    """A biased layer to adapt and an output head that LoRA leaves alone."""

    def __init__(self, dtype=torch.float32) -> None:
        super().__init__()
        self.up = torch.nn.Linear(3, 2, bias=True, dtype=dtype)
        self.lm_head = torch.nn.Linear(2, 2, bias=False, dtype=dtype)

    def get_output_embeddings(self):
        return self.lm_head


def test_the_layer_adds_alpha_over_rank_times_b_a_to_the_biased_base():
    torch.manual_seed(0)
    net = _TwoLayers()
    w, b = net.up.weight.detach().clone(), net.up.bias.detach().clone()
    apply_lora(net, LoraConfig(rank=2, alpha=6.0, target_modules=["up", "lm_head"]))
    assert not isinstance(net.lm_head, LoraLinear)  # the head is never adapted
    layer = net.up
    assert layer.scaling == 3.0
    with torch.no_grad():
        layer.lora_B.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
    a = layer.lora_A.weight.detach()
    x = torch.tensor([[1.0, -2.0, 0.5]])
    by_hand = x @ w.T + b + 3.0 * (x @ a.T) @ torch.tensor([[1.0, 0.0], [0.0, 2.0]]).T
    torch.testing.assert_close(layer(x), by_hand)
    torch.testing.assert_close(x @ layer.merged_weight().T + b, by_hand)


def test_merging_keeps_the_weights_dtype():
    net = _TwoLayers(dtype=torch.bfloat16)
    apply_lora(net, LoraConfig(rank=2, alpha=2.0, target_modules=["up"]))
    assert net.up.merged_weight().dtype == torch.bfloat16


def test_adapter_tensors_gather_sharded_parameters():
    net = _TwoLayers()
    apply_lora(net, LoraConfig(rank=2, alpha=2.0, target_modules=["up"]))
    full = torch.arange(6.0).reshape(2, 3)
    # An FSDP2 shard is a DTensor: full_tensor() gathers it; a plain tensor is used as it is.
    net.up.lora_A.weight.full_tensor = lambda: full
    tensors = adapter_tensors(net)
    assert set(tensors) == {"base_model.model.up.lora_A.weight", "base_model.model.up.lora_B.weight"}
    torch.testing.assert_close(tensors["base_model.model.up.lora_A.weight"], full)
    torch.testing.assert_close(tensors["base_model.model.up.lora_B.weight"], torch.zeros(2, 2))


def test_an_unknown_target_lists_the_models_layer_names():
    net = torch.nn.Module()
    net.model = torch.nn.Module()
    net.model.block = _TwoLayers()  # layers named model.block.up and model.block.lm_head
    net.get_output_embeddings = lambda: None
    with pytest.raises(ConfigError, match=r"\(this model has: \['lm_head', 'up'\]\)"):
        apply_lora(net, LoraConfig(target_modules=["q_proj"]))


def test_adapters_start_like_peft_on_the_base_layers_device_and_dtype():
    torch.manual_seed(0)
    net = torch.nn.Module()
    net.up = torch.nn.Linear(64, 8, dtype=torch.bfloat16)
    net.get_output_embeddings = lambda: None
    apply_lora(net, LoraConfig(rank=64, alpha=2.0, target_modules=["up"]))
    a, b = net.up.lora_A.weight.detach(), net.up.lora_B.weight.detach()
    assert a.dtype == b.dtype == torch.bfloat16 and net.up.lora_A.bias is None and net.up.lora_B.bias is None
    # A: kaiming-uniform with a = sqrt(5), i.e. uniform in +-1/sqrt(in_features); B: zeros.
    bound = 1 / 64**0.5
    assert float(a.abs().max()) <= bound * 1.01 and float(a.abs().max()) > bound * 0.95
    assert not b.any()
    meta = torch.nn.Module()
    meta.up = torch.nn.Linear(4, 2, device="meta")
    meta.get_output_embeddings = lambda: None
    apply_lora(meta, LoraConfig(rank=2, alpha=2.0, target_modules=["up"]))
    assert meta.up.lora_A.weight.device.type == meta.up.lora_B.weight.device.type == "meta"


def test_lora_dropout_drops_only_the_adapters_input_in_training():
    torch.manual_seed(0)
    net = _TwoLayers()
    apply_lora(net, LoraConfig(rank=2, alpha=2.0, dropout=0.5, target_modules=["up"]))
    torch.nn.init.normal_(net.up.lora_B.weight)
    x = torch.ones(64, 3)
    net.train()
    assert not torch.allclose(net.up(x), net.up(x))
    net.eval()
    torch.testing.assert_close(net.up(x), net.up(x))


def test_adapter_config_is_peft_s():
    net = _TwoLayers()
    adapter = Adapter(net, LoraConfig(rank=4, alpha=8.0, dropout=0.1, target_modules=["up"]), "org/base")
    assert adapter.modules == ["up"]
    assert adapter.config == {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": "org/base",
        "r": 4,
        "lora_alpha": 8.0,
        "lora_dropout": 0.1,
        "target_modules": ["up"],
        "bias": "none",
        "use_rslora": False,
        "fan_in_fan_out": False,
        "inference_mode": True,
    }
    names = ["model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj", "model.layers.0.mlp.up_proj"]
    assert adapter_config(LoraConfig(), "m", names)["target_modules"] == [
        "q_proj",
        "up_proj",
    ]


def test_published_adapter_tensors_are_copies():
    net = _TwoLayers()
    apply_lora(net, LoraConfig(rank=2, alpha=2.0, target_modules=["up"]))
    tensors = adapter_tensors(net)
    with torch.no_grad():
        net.up.lora_B.weight.add_(1.0)  # the next step trains on while the copy is sent
    assert not tensors["base_model.model.up.lora_B.weight"].any()


def test_model_lora_adapts_the_model_and_names_its_base_in_the_adapter_config():
    # Without [model.lora] the model trains whole; with it, the published adapter_config.json
    # names the model it adapts, so PEFT and vLLM load the adapter on the right base.
    plain = _TwoLayers()
    assert maybe_adapter(plain, ModelTrainConfig(name="org/base")) is None
    assert not isinstance(plain.up, LoraLinear)
    net = _TwoLayers()
    adapter = maybe_adapter(net, ModelTrainConfig(name="org/base", lora=LoraConfig(target_modules=["up"])))
    assert isinstance(net.up, LoraLinear) and adapter.modules == ["up"]
    assert adapter.config["base_model_name_or_path"] == "org/base"
