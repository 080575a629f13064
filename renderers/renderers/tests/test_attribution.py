"""Role attribution, stop tokens, parsing and bridging on the tiny model's ChatML template."""

from __future__ import annotations

import json

import pytest
from transformers import PreTrainedTokenizerFast

SYSTEM = {"role": "system", "content": "Reverse the text."}
USER = {"role": "user", "content": "hello"}
ASSISTANT = {"role": "assistant", "content": "olleh"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Find a word.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}, "n": {"type": "integer"}}},
        },
    }
]
TOOL_TURN = [
    {"role": "user", "content": "look up cat"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "need the tool",
        "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": {"word": "cat", "n": 2}}}
        ],
    },
    {"role": "tool", "tool_call_id": "c0", "content": "feline"},
    {"role": "assistant", "content": "It is a feline."},
]


def owned_text(tok, rendered, i):
    return tok.decode([t for t, m in zip(rendered.token_ids, rendered.message_index, strict=False) if m == i])


@pytest.fixture(scope="module")
def tok(tiny_dir):
    return PreTrainedTokenizerFast.from_pretrained(str(tiny_dir))


def test_auto_picks_qwen3_for_tiny_model(make, tiny_dir):
    r = make("auto", tiny_dir)
    assert r.resolved == "qwen3"
    assert type(r.inner).name == "qwen3"


@pytest.mark.parametrize("name", ["auto", "qwen3", "default"])
def test_role_attribution_is_exact(make, tiny_dir, tok, name):
    r = make(name, tiny_dir)
    out = r.render([SYSTEM, USER, ASSISTANT])
    assert len(out.token_ids) == len(out.message_index) == len(out.roles)
    assert owned_text(tok, out, 0) == "Reverse the text."
    assert owned_text(tok, out, 1) == "hello"
    # the assistant owns exactly what the model samples after "<|im_start|>assistant\n"
    assert owned_text(tok, out, 2) == "<think>\n\n</think>\n\nolleh<|im_end|>"
    template = tok.decode([t for t, m in zip(out.token_ids, out.message_index, strict=False) if m == -1])
    assert template == "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n\n"
    assert {role for role, m in zip(out.roles, out.message_index, strict=False) if m == -1} == {"template"}
    assert [out.roles[k] for k in range(len(out.roles)) if out.message_index[k] == 2][0] == "assistant"


def test_generation_prompt_is_template(make, tiny_dir, tok):
    out = make("qwen3", tiny_dir).render([USER], add_generation_prompt=True)
    tail = tok.decode(out.token_ids[-len("<|im_start|>assistant\n") + len("<|im_start|>") - 1 :])
    assert tail == "<|im_start|>assistant\n"
    assert out.message_index[-11:] == [-1] * 11


@pytest.mark.parametrize(
    "tools,messages",
    [
        (None, [SYSTEM, USER, ASSISTANT, {"role": "user", "content": "again"}]),
        (TOOLS, [SYSTEM, *TOOL_TURN]),
        (TOOLS, TOOL_TURN),
    ],
)
def test_family_matches_hf_template_and_default(make, tiny_dir, tok, tools, messages):
    """The tiny model's chat template (what vLLM's chat endpoint uses) and the qwen3 renderer agree."""
    fam, gen = make("qwen3", tiny_dir), make("default", tiny_dir)
    for prompt in (False, True):
        hf = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=prompt, tokenize=False)
        ids = fam.render_ids(messages, tools, prompt)
        assert tok.decode(ids) == hf
        assert gen.render_ids(messages, tools, prompt) == ids
    a, b = fam.render(messages, tools), gen.render(messages, tools)
    assert a.token_ids == b.token_ids
    assert a.message_index == b.message_index


def test_tool_turn_attribution(make, tiny_dir, tok):
    out = make("qwen3", tiny_dir).render(TOOL_TURN, TOOLS)
    call = owned_text(tok, out, 1)
    assert call.startswith("<think>\nneed the tool\n</think>\n\n<tool_call>\n")
    assert call.endswith("</tool_call><|im_end|>")
    assert owned_text(tok, out, 2) == "feline"
    assert owned_text(tok, out, 3).endswith("It is a feline.<|im_end|>")


def test_stop_tokens(make, tiny_dir, tok):
    expected = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    for name in ("auto", "qwen3", "default"):
        assert sorted(make(name, tiny_dir).get_stop_token_ids()) == sorted(expected)


@pytest.mark.parametrize("name", ["qwen3", "default"])
def test_parse_response_round_trip(make, tiny_dir, tok, name):
    cfg = {"tool_parser": "qwen3"} if name == "default" else {}
    r = make(name, tiny_dir, **cfg)
    msgs = [*TOOL_TURN[:1], TOOL_TURN[1]]
    out = r.render(msgs, TOOLS)
    sampled = [t for t, m in zip(out.token_ids, out.message_index, strict=False) if m == 1]
    prompt = r.render_ids(msgs[:1], TOOLS, add_generation_prompt=True)
    msg = r.parse_response(sampled, TOOLS, prompt)
    assert msg["role"] == "assistant"
    assert msg["reasoning_content"].strip() == "need the tool"
    assert msg["content"].strip() == ""
    (call,) = msg["tool_calls"]
    assert call["function"]["name"] == "lookup"
    assert json.loads(call["function"]["arguments"]) == {"word": "cat", "n": 2}
    plain = r.parse_response(
        tok.encode("<think>\nhm\n</think>\n\nolleh", add_special_tokens=False) + r.get_stop_token_ids()[:1]
    )
    assert plain["content"].strip() == "olleh" and plain["reasoning_content"].strip() == "hm"
    assert "tool_calls" not in plain


def test_bridge_to_next_turn_extends_sampled_sequence(make, tiny_dir, tok):
    r = make("qwen3", tiny_dir)
    prompt = r.render_ids([SYSTEM, USER], add_generation_prompt=True)
    completion = tok.encode("<think>\n\n</think>\n\nolleh<|im_end|>", add_special_tokens=False)
    tool = [{"role": "tool", "content": "42"}]
    # tool results bridge into one user turn of tool responses, appended after the sample
    suffix = r.bridge_to_next_turn(prompt, completion, tool)
    assert (
        tok.decode(suffix)
        == "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    # a completion cut off by max_tokens gets its end-of-turn token synthesised
    cut = r.bridge_to_next_turn(prompt, completion[:-3], tool)
    assert tok.decode(cut).startswith("<|im_end|>\n<|im_start|>user\n<tool_response>")
    # a new user query makes Qwen3's template drop earlier reasoning: re-render (new branch)
    again = [{"role": "user", "content": "again"}]
    assert r.bridge_to_next_turn(prompt, completion, again) is None
    # ... unless past reasoning is retained, then the user turn is bridged too
    keep = make("qwen3", tiny_dir, thinking_retention="all")
    assert (
        tok.decode(keep.bridge_to_next_turn(prompt, completion, again))
        == "\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n"
    )
    assert r.bridge_to_next_turn(prompt, completion, [ASSISTANT]) is None
    assert make("default", tiny_dir).bridge_to_next_turn(prompt, completion, tool) is None


def test_enable_thinking_false_prefills_empty_think(make, tiny_dir, tok):
    r = make("qwen3", tiny_dir, enable_thinking=False)
    ids = r.render_ids([USER], add_generation_prompt=True)
    assert tok.decode(ids).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    hf = tok.apply_chat_template([USER], add_generation_prompt=True, enable_thinking=False, tokenize=False)
    assert tok.decode(ids) == hf
    d = make("default", tiny_dir, enable_thinking=False)
    assert d.render_ids([USER], add_generation_prompt=True) == ids
