"""``tiny-qwen3.5``: a text-only Qwen3.5 hybrid (Gated DeltaNet + full attention) that loads
with transformers' auto classes and generates through its recurrent cache."""

from __future__ import annotations

import json

import pytest
import torch
import typer
from prl_model_init import count_parameters, make_model
from prl_model_init.plugin import prl_add_commands
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

PRESET = "tiny-qwen3.5"


@pytest.fixture(scope="module")
def hybrid_dir(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("models") / PRESET, preset=PRESET, seed=0)


def test_loads_as_the_text_only_qwen3_5_class(hybrid_dir):
    model = AutoModelForCausalLM.from_pretrained(hybrid_dir)
    tok = AutoTokenizer.from_pretrained(hybrid_dir)
    assert type(model).__name__ == "Qwen3_5ForCausalLM"
    cfg = json.loads((hybrid_dir / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_5_text" and cfg["architectures"] == ["Qwen3_5ForCausalLM"]
    assert cfg["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert cfg["prl_renderer"] == "qwen3"
    assert model.config.vocab_size == len(tok) == 320
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert sum(p.numel() for p in model.parameters()) == count_parameters(PRESET)
    names = load_file(hybrid_dir / "model.safetensors")
    assert "model.layers.0.linear_attn.in_proj_qkv.weight" in names
    assert "model.layers.0.linear_attn.conv1d.weight" in names
    assert "model.layers.3.self_attn.q_proj.weight" in names


def test_cached_sampling_matches_a_full_forward(hybrid_dir):
    """generate() runs the linear layers step by step from their cached state; the scores
    it sampled from equal those of one forward over the whole sequence."""
    model = AutoModelForCausalLM.from_pretrained(hybrid_dir).eval()
    tok = AutoTokenizer.from_pretrained(hybrid_dir)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "reverse: hybrid"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(
            prompt, max_new_tokens=16, do_sample=True, top_k=0, return_dict_in_generate=True, output_logits=True
        )
        full = model(out.sequences).logits[0, prompt.shape[1] - 1 : -1]
    stepped = torch.stack(out.logits, dim=1)[0]
    assert len(set(out.sequences[0, prompt.shape[1] :].tolist())) > 1  # sampled, not one repeated token
    torch.testing.assert_close(stepped, full, atol=1e-4, rtol=1e-4)


def test_cli_writes_the_preset(tmp_path):
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """prl"""

    prl_add_commands(app=app)
    res = CliRunner().invoke(app, ["model", "init", "--preset", PRESET, "--out", str(tmp_path / "m")])
    assert res.exit_code == 0, res.output
    assert f"wrote {PRESET} model ({count_parameters(PRESET):,} parameters, seed 0)" in res.output
    again = make_model(tmp_path / "again", preset=PRESET, seed=0)
    first, second = load_file(tmp_path / "m" / "model.safetensors"), load_file(again / "model.safetensors")
    assert all(torch.equal(first[k], second[k]) for k in first)
