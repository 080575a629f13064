from __future__ import annotations

import json

import pytest
import torch
from prl_model_init import PRESETS, ModelInitError, active_parameters, count_parameters, make_model
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig


def test_tiny_loads_with_auto_classes(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert model.config.model_type == "qwen3"
    assert model.config.vocab_size == len(tok) == 320
    assert model.config.vocab_size % 64 == 0
    assert model.config.tie_word_embeddings
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert sum(p.numel() for p in model.parameters()) == count_parameters("tiny")
    assert 500_000 < count_parameters("tiny") < 3_000_000 < count_parameters("small") < 30_000_000


def test_generation_config_stops_on_chat_end(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    gen = GenerationConfig.from_pretrained(tiny_dir)
    im_end, eot = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert gen.eos_token_id == [im_end, eot]
    assert tok.eos_token_id == im_end
    assert tok.pad_token == "<|pad|>" and tok.pad_token_id not in (im_end, eot)


def test_byte_level_round_trip_and_special_tokens(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    text = "Grüße, 世界! \t\n  emoji 🙂 <|im_start|>x"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    # one id per UTF-8 byte, except the special token which is a single id
    body = text.replace("<|im_start|>", "")
    assert len(ids) == len(body.encode()) + 1
    assert tok.encode("A", add_special_tokens=False) == [ord("A")]
    for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>"):
        assert len(tok.encode(t, add_special_tokens=False)) == 1
    assert (
        tok.decode(tok.encode("<think>hi</think>", add_special_tokens=False), skip_special_tokens=True)
        == "<think>hi</think>"
    )


def test_chat_template_renders_chatml_turns(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    msgs = [{"role": "system", "content": "Reverse."}, {"role": "user", "content": "abc"}]
    prompt = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert prompt == "<|im_start|>system\nReverse.<|im_end|>\n<|im_start|>user\nabc<|im_end|>\n<|im_start|>assistant\n"
    no_think = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert no_think.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    full = tok.apply_chat_template([*msgs, {"role": "assistant", "content": "cba"}], tokenize=False)
    assert full.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\ncba<|im_end|>\n")


def test_same_seed_same_weights_other_seed_differs(tmp_path, tiny_dir):
    again = load_file(make_model(tmp_path / "a", seed=0) / "model.safetensors")
    other = load_file(make_model(tmp_path / "b", seed=1) / "model.safetensors")
    base = load_file(tiny_dir / "model.safetensors")
    assert all(torch.equal(base[k], again[k]) for k in base)
    assert not torch.equal(
        base["model.layers.0.self_attn.q_proj.weight"], other["model.layers.0.self_attn.q_proj.weight"]
    )


def test_refuses_non_empty_dir_and_unknown_preset(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(ModelInitError, match="not empty; pass --force"):
        make_model(tmp_path)
    assert (tmp_path / "keep.txt").exists()
    with pytest.raises(ModelInitError, match="--preset must be one of tiny, small, tiny-moe"):
        make_model(tmp_path / "m", preset="huge")
    assert not (tmp_path / "m").exists()
    out = make_model(tmp_path, force=True)
    assert not (out / "keep.txt").exists() and (out / "config.json").exists()
    assert [p.name for p in tmp_path.parent.iterdir() if p.name.startswith(f".{tmp_path.name}.")] == []


def test_marker_names_qwen3_renderer(tiny_dir):
    assert json.loads((tiny_dir / "config.json").read_text())["prl_renderer"] == "qwen3"
    assert json.loads((tiny_dir / "tokenizer_config.json").read_text())["prl_renderer"] == "qwen3"


def test_tiny_overfits_a_reversal_example(tiny_dir):
    """A user would notice a model that cannot learn: 40 Adam steps must cut the loss a lot."""
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    msgs = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "olleh"}]
    ids = torch.tensor([tok.apply_chat_template(msgs, tokenize=True, return_dict=True)["input_ids"]])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    # One thread: on a shared 2-core machine two spinning threads run ~30x slower.
    torch.set_num_threads(1)
    first = None
    for _ in range(40):
        loss = model(input_ids=ids, labels=ids).loss
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.set_num_threads(threads)
    assert first > 5.0  # ~ln(320) at random init
    assert loss.item() < 0.5 * first


def test_presets_have_vllm_cpu_head_sizes():
    for p in PRESETS.values():
        assert p.head_dim in (32, 64, 80, 96, 112, 128)
        assert p.num_attention_heads % p.num_key_value_heads == 0


def test_tiny_moe_is_a_qwen3_moe_that_loads_and_generates(tiny_moe_dir, tiny_dir):
    cfg = json.loads((tiny_moe_dir / "config.json").read_text())
    # the published Qwen3-MoE key, which transformers 4, 5 and vLLM all read
    assert cfg["model_type"] == "qwen3_moe" and cfg["num_experts"] == 8 and "num_local_experts" not in cfg
    tok = AutoTokenizer.from_pretrained(tiny_moe_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_moe_dir)
    assert type(model).__name__ == "Qwen3MoeForCausalLM"
    assert (model.config.num_experts, model.config.num_experts_per_tok, model.config.num_hidden_layers) == (8, 2, 4)
    assert all(type(layer.mlp).__name__ == "Qwen3MoeSparseMoeBlock" for layer in model.model.layers)
    assert sum(p.numel() for p in model.parameters()) == count_parameters("tiny-moe")
    # the two experts a token uses are as wide as tiny's MLP: about tiny's compute per token
    assert active_parameters("tiny-moe") == pytest.approx(count_parameters("tiny"), rel=0.01)
    assert count_parameters("tiny-moe") > 3 * active_parameters("tiny-moe")
    # the tokenizer is tiny's, byte for byte
    assert (tiny_moe_dir / "tokenizer.json").read_text() == (tiny_dir / "tokenizer.json").read_text()
    ids = tok.apply_chat_template([{"role": "user", "content": "abc"}], add_generation_prompt=True, return_dict=True)
    prompt = torch.tensor([ids["input_ids"]])
    torch.manual_seed(0)
    out = model.generate(prompt, max_new_tokens=8, do_sample=True, pad_token_id=tok.pad_token_id)
    assert out.shape[1] > prompt.shape[1] and torch.equal(out[0, : prompt.shape[1]], prompt[0])
    shards = load_file(tiny_moe_dir / "model.safetensors")
    # written in the checkpoint layout of the published models: one tensor per expert
    assert "model.layers.0.mlp.experts.7.down_proj.weight" in shards and "model.layers.3.mlp.gate.weight" in shards


def test_tiny_moe_same_seed_same_weights(tmp_path, tiny_moe_dir):
    again = load_file(make_model(tmp_path / "a", preset="tiny-moe", seed=0) / "model.safetensors")
    base = load_file(tiny_moe_dir / "model.safetensors")
    assert base.keys() == again.keys() and all(torch.equal(base[k], again[k]) for k in base)
