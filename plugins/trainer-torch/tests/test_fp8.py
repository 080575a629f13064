"""Blockwise FP8: the block quantizer's error bound, ``prl convert to-fp8 / to-bf16`` on a
model directory, what they refuse, and ``prl export --dtype fp8`` (one process and two
gloo ranks) against bf16 export -> ``to-fp8``.

``prl model init`` has no MoE preset (its presets are tiny, small and the dense Qwen3
shapes), so the MoE cases use a tiny Qwen3-MoE made here from ``Qwen3MoeConfig`` with the
tiny model's tokenizer: 4 experts, router ``mlp.gate`` (kept in bf16), untied head."""

from __future__ import annotations

import json
import math

import pytest
import torch
import typer
from prl_trainer_torch.cli import add_commands
from prl_trainer_torch.fp8 import dequantize_block, quantize_block, should_quantize
from safetensors import safe_open
from typer.testing import CliRunner

E4M3_REL = 2.0**-4  # 3 mantissa bits: rounding to nearest is off by at most half a step, 2^-4 of |x|
E4M3_SUBNORMAL_HALF_STEP = 2.0**-10  # below 2^-6 the step is fixed at 2^-9


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory, tiny_model):
    """A 2-layer, 4-expert Qwen3-MoE directory, saved by transformers (per-expert weights)."""
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM, Qwen3MoeConfig

    dense = AutoConfig.from_pretrained(tiny_model)
    cfg = Qwen3MoeConfig(
        vocab_size=dense.vocab_size,
        hidden_size=192,
        intermediate_size=256,
        moe_intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=32,
        num_experts=4,
        num_experts_per_tok=2,
        tie_word_embeddings=False,
        eos_token_id=dense.eos_token_id,
        pad_token_id=dense.pad_token_id,
    )
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("models") / "tiny-moe"
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    for f in tiny_model.iterdir():
        if f.name.startswith(("tokenizer", "chat_template")):
            shutil.copy2(f, out / f.name)
    return out


def _model_dir(kind, request):
    return request.getfixturevalue("tiny_model" if kind == "dense" else "tiny_moe")


KEPT = {
    "dense": ["lm_head", "model.embed_tokens"],  # the tiny model ties its head: no lm_head tensor, listed all the same
    "moe": ["lm_head", "model.embed_tokens", "model.layers.0.mlp.gate", "model.layers.1.mlp.gate"],
}


def _app() -> typer.Typer:
    app = typer.Typer()
    add_commands(app)
    return app


def _invoke(*args: str):
    return CliRunner().invoke(_app(), [str(a) for a in args])


def _tensors(directory) -> dict[str, torch.Tensor]:
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    out: dict[str, torch.Tensor] = {}
    for name in sorted(set(index["weight_map"].values())):
        with safe_open(str(directory / name), framework="pt") as f:
            out.update({k: f.get_tensor(k) for k in f.keys()})
    assert set(out) == set(index["weight_map"])
    return out


def _assert_within_e4m3(restored: torch.Tensor, original: torch.Tensor, scale: torch.Tensor, out_rel=0.0) -> None:
    """Per element: |w - deq| <= 2^-4 |w| + scale_of_its_block * 2^-10 (e4m3's rounding in
    the scaled domain, mapped back by the block's scale), plus float32 noise; ``out_rel``
    adds the rounding of a bf16 output (2^-8 of |w| covers 2^-9 of |deq|)."""
    rows, cols = original.shape
    block_scale = scale.repeat_interleave(128, 0).repeat_interleave(128, 1)[:rows, :cols]
    err = (restored.float() - original.float()).abs()
    bound = (E4M3_REL + out_rel) * original.float().abs() + E4M3_SUBNORMAL_HALF_STEP * block_scale
    assert bool((err <= bound * (1 + 1e-5) + 1e-12).all()), f"worst excess {(err - bound).max().item()}"


@pytest.mark.parametrize("shape", [(256, 384), (300, 200), (7, 129)])
def test_block_round_trip_is_within_the_e4m3_bound(shape):
    gen = torch.Generator().manual_seed(0)
    # Magnitudes that differ by 10^4 between rows, so a per-tensor scale would lose the small ones.
    w = torch.randn(shape, generator=gen) * torch.logspace(-3, 1, shape[0])[:, None]
    q, scale = quantize_block(w)
    assert q.dtype == torch.float8_e4m3fn and q.shape == w.shape
    assert scale.dtype == torch.float32
    assert scale.shape == (math.ceil(shape[0] / 128), math.ceil(shape[1] / 128))
    restored = dequantize_block(q, scale, torch.float32)
    _assert_within_e4m3(restored, w, scale)
    # each block's largest magnitude lands on 448 and comes back exactly
    for i in range(scale.shape[0]):
        for j in range(scale.shape[1]):
            blk = (slice(i * 128, (i + 1) * 128), slice(j * 128, (j + 1) * 128))
            torch.testing.assert_close(restored[blk].abs().max(), w[blk].abs().max(), rtol=1e-6, atol=0)


def test_zero_block_and_bf16_output():
    w = torch.zeros(130, 130)
    w[129, 129] = 3.0
    q, scale = quantize_block(w)
    assert torch.isfinite(scale).all() and scale[0, 0] > 0
    restored = dequantize_block(q, scale)
    assert restored.dtype == torch.bfloat16
    assert torch.equal(restored.float(), w)


def test_which_weights_are_quantized():
    w2, w1 = torch.empty(4, 4), torch.empty(4)
    assert should_quantize("model.layers.0.mlp.gate_proj.weight", w2)
    assert should_quantize("model.layers.0.self_attn.q_proj.weight", w2)
    assert should_quantize("model.layers.3.mlp.experts.7.down_proj.weight", w2)
    for name in (
        "model.embed_tokens.weight",
        "lm_head.weight",
        "model.layers.0.mlp.gate.weight",  # MoE router
        "model.layers.0.mlp.router.weight",
        "model.visual.blocks.0.attn.qkv.weight",
        "model.vision_tower.encoder.layers.0.mlp.fc1.weight",
    ):
        assert not should_quantize(name, w2), name
    assert not should_quantize("model.layers.0.input_layernorm.weight", w1)
    assert not should_quantize("model.layers.0.self_attn.q_proj.bias", w1)


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_fp8_directory_matches_the_release_layout(tmp_path, kind, request):
    """Modelled on deepseek-ai/DeepSeek-V3's release: config.json has
    ``quantization_config = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
    "weight_block_size": [128, 128]}``; each quantized linear ``X.weight`` is F8_E4M3 in its
    real shape with ``X.weight_scale_inv`` F32 of shape [ceil(out/128), ceil(in/128)] beside it;
    embeddings, norms, router gates and lm_head are BF16; shards with
    ``model.safetensors.index.json``. Compared here: tensor dtypes, scale names and shapes,
    the config keys and values, the index, and that transformers' FineGrainedFP8Config reads
    the config (``modules_to_not_convert`` is its key for the modules left in bf16)."""
    from transformers import AutoConfig, FineGrainedFP8Config

    tiny_model = _model_dir(kind, request)
    result = _invoke("convert", "to-fp8", tiny_model, tmp_path / "fp8")
    assert result.exit_code == 0, result.output
    out = tmp_path / "fp8"
    tensors = _tensors(out)
    with safe_open(str(tiny_model / "model.safetensors"), framework="pt") as f:
        source = {k: f.get_tensor(k) for k in f.keys()}
    scales = {k for k in tensors if k.endswith(".weight_scale_inv")}
    assert set(tensors) - scales == set(source)
    quantized = {k[: -len("_scale_inv")] for k in scales}
    assert quantized == {k for k in source if k.endswith("_proj.weight")}
    for name, t in tensors.items():
        if name in quantized:
            assert t.dtype == torch.float8_e4m3fn and t.shape == source[name].shape, name
            scale = tensors[name + "_scale_inv"]
            rows, cols = t.shape
            assert scale.dtype == torch.float32 and scale.shape == (math.ceil(rows / 128), math.ceil(cols / 128))
        elif name not in scales:
            assert t.dtype == torch.bfloat16, name
    config = json.loads((out / "config.json").read_text())
    quant = config["quantization_config"]
    assert {k: quant[k] for k in ("quant_method", "fmt", "activation_scheme", "weight_block_size")} == {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
    }
    assert quant["modules_to_not_convert"] == quant["ignored_layers"] == KEPT[kind]
    parsed = FineGrainedFP8Config.from_dict(AutoConfig.from_pretrained(out).quantization_config)
    assert parsed.weight_block_size == [128, 128] and parsed.activation_scheme == "dynamic"
    assert parsed.modules_to_not_convert == KEPT[kind]
    for asset in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"):
        assert (out / asset).read_bytes() == (tiny_model / asset).read_bytes(), asset


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_to_bf16_gives_back_the_weights(tmp_path, kind, request):
    """An FP8-only release dequantized to bf16 loads with transformers, and every weight is
    the original within the e4m3 bound (transformers itself needs a GPU, or accelerate, to
    load the FP8 directory, so the check is on the dequantized weights)."""
    from transformers import AutoModelForCausalLM

    tiny_model = _model_dir(kind, request)
    assert _invoke("convert", "to-fp8", tiny_model, tmp_path / "fp8").exit_code == 0
    result = _invoke("convert", "to-bf16", tmp_path / "fp8", tmp_path / "bf16")
    assert result.exit_code == 0, result.output
    assert "quantization_config" not in json.loads((tmp_path / "bf16" / "config.json").read_text())
    fp8 = _tensors(tmp_path / "fp8")
    restored = _tensors(tmp_path / "bf16")
    with safe_open(str(tiny_model / "model.safetensors"), framework="pt") as f:
        original = {k: f.get_tensor(k) for k in f.keys()}
    assert restored.keys() == original.keys()
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "bf16")
    assert model.dtype == torch.bfloat16 and torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits).all()
    changed = 0
    for name, w in original.items():
        assert restored[name].dtype == torch.bfloat16, name
        if name in fp8 and name + "_scale_inv" in fp8:
            # the reference is the bf16 rounding the quantizer started from
            _assert_within_e4m3(restored[name], w.to(torch.bfloat16), fp8[name + "_scale_inv"], out_rel=2.0**-8)
            changed += not torch.equal(restored[name], w.to(torch.bfloat16))
        else:
            assert torch.equal(restored[name], w.to(torch.bfloat16)), name
    assert changed > 0  # quantization did happen


def test_conversions_refuse_bad_sources(tmp_path, tiny_model):
    assert _invoke("convert", "to-fp8", tiny_model, tmp_path / "fp8").exit_code == 0
    cases = [
        (("to-fp8", tmp_path / "fp8", tmp_path / "x"), "is already quantized"),
        (("to-bf16", tiny_model, tmp_path / "x"), "is not a blockwise FP8 model"),
        (("to-fp8", tmp_path / "missing", tmp_path / "x"), "is not a directory"),
        (("to-fp8", tiny_model, tiny_model), "the output directory is the source"),
        (("to-fp8", tiny_model, tmp_path / "fp8"), "already exists and is not empty"),
    ]
    # float8 tensors under a config that does not say so are refused too
    stripped = tmp_path / "stripped"
    stripped.mkdir()
    for f in (tmp_path / "fp8").iterdir():
        (stripped / f.name).write_bytes(f.read_bytes())
    config = json.loads((stripped / "config.json").read_text())
    del config["quantization_config"]
    (stripped / "config.json").write_text(json.dumps(config))
    cases.append((("to-fp8", stripped, tmp_path / "x"), "already holds float8 tensors"))
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    cases.append((("to-fp8", adapter, tmp_path / "x"), "is a LoRA adapter"))
    for args, message in cases:
        result = _invoke("convert", *args)
        lines = [x for x in result.output.splitlines() if x.strip()]
        assert result.exit_code == 2, (args, result.output)
        assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.output, (args, lines)
    assert not (tmp_path / "x").exists()


def test_export_fp8_refuses_a_lora_checkpoint(tmp_path):
    step = tmp_path / "checkpoints" / "step_1"
    (step / "trainer").mkdir(parents=True)
    (step / "trainer" / ".metadata").write_bytes(b"")
    (step / "trainer" / "adapter_config.json").write_text(json.dumps({"r": 4, "lora_alpha": 8, "target_modules": []}))
    for extra in ([], ["--num-workers", "2"]):
        result = _invoke("export", step, "--dtype", "fp8", *extra)
        lines = [x for x in result.output.splitlines() if x.strip()]
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert "is a LoRA checkpoint" in lines[0]
    assert not (step / "weights-FP8").exists()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_dcp_to_fp8_equals_bf16_export_then_to_fp8(tmp_path, kind, request, sft_config):
    """A trained checkpoint exported straight to FP8, by one process and by two gloo ranks
    that each quantize their own tensors, holds bit for bit the tensors of the bf16 export
    converted by ``prl convert to-fp8`` (for MoE: per-expert weights, as releases store them)."""
    from prl_trainer_torch.trainer import TorchTrainer

    tiny_model = _model_dir(kind, request)
    fake = {"type": "fake", "seq_len": 32, "batch_size": 4}
    cfg = sft_config(tmp_path, tiny_model, "unused", data=fake, ckpt={}, max_steps=2)
    assert TorchTrainer.run_sft(cfg) == 0
    step = tmp_path / "outputs" / "t" / "checkpoints" / "step_2"
    assert _invoke("export", step, tmp_path / "bf16").exit_code == 0
    assert _invoke("convert", "to-fp8", tmp_path / "bf16", tmp_path / "via-bf16").exit_code == 0
    one = _invoke("export", step, "--dtype", "fp8")
    assert one.exit_code == 0, one.output
    two = _invoke("export", step, tmp_path / "two", "--dtype", "fp8", "--num-workers", "2")
    assert two.exit_code == 0, two.output
    index = json.loads((tmp_path / "two" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    reference = _tensors(tmp_path / "via-bf16")
    assert any(t.dtype == torch.float8_e4m3fn for t in reference.values())
    for directory in (step / "weights-FP8", tmp_path / "two"):
        got = _tensors(directory)
        assert got.keys() == reference.keys(), directory
        for name, t in reference.items():
            assert got[name].dtype == t.dtype and torch.equal(got[name].view(torch.uint8), t.view(torch.uint8)), name
        ref_cfg = json.loads((tmp_path / "via-bf16" / "config.json").read_text())
        got_cfg = json.loads((directory / "config.json").read_text())
        assert got_cfg["quantization_config"] == ref_cfg["quantization_config"]
        assert (directory / "tokenizer.json").exists() and (directory / "generation_config.json").exists()


def test_to_bf16_reads_a_release_with_other_blocks_and_split_shards(tmp_path):
    """As some releases do: 64 x 64 blocks, and a scale in another shard than its weight."""
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(1)
    w = torch.randn(200, 72, generator=gen)
    norm = torch.rand(72, generator=gen).to(torch.bfloat16)
    q, scale = quantize_block(w, 64)
    assert scale.shape == (4, 2)
    src = tmp_path / "release"
    src.mkdir()
    save_file({"model.layers.0.mlp.down_proj.weight": q, "model.norm.weight": norm}, str(src / "a.safetensors"))
    save_file({"model.layers.0.mlp.down_proj.weight_scale_inv": scale}, str(src / "b.safetensors"))
    weight_map = {
        "model.layers.0.mlp.down_proj.weight": "a.safetensors",
        "model.norm.weight": "a.safetensors",
        "model.layers.0.mlp.down_proj.weight_scale_inv": "b.safetensors",
    }
    (src / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    quant = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [64, 64]}
    (src / "config.json").write_text(json.dumps({"model_type": "qwen3", "quantization_config": quant}))
    (src / "tokenizer.json").write_text("{}")
    result = _invoke("convert", "to-bf16", src, tmp_path / "bf16")
    assert result.exit_code == 0, result.output
    got = _tensors(tmp_path / "bf16")
    assert set(got) == {"model.layers.0.mlp.down_proj.weight", "model.norm.weight"}
    torch.testing.assert_close(got["model.layers.0.mlp.down_proj.weight"], dequantize_block(q, scale, block=(64, 64)))
    assert torch.equal(got["model.norm.weight"], norm)
    assert (tmp_path / "bf16" / "tokenizer.json").exists()
    # read with 128 x 128 blocks, the same scales would not fit: refused, not mis-scaled
    quant["weight_block_size"] = [128, 128]
    (src / "config.json").write_text(json.dumps({"model_type": "qwen3", "quantization_config": quant}))
    bad = _invoke("convert", "to-bf16", src, tmp_path / "bad")
    assert bad.exit_code == 2 and "does not fit" in bad.output, bad.output
    assert not (tmp_path / "bad").exists()  # nothing half-written
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
