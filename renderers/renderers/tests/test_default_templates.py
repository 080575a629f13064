"""``default`` on hand-written templates: which characters each message owns (what trains
under a loss mask), with the tokenizer's own stop tokens, tool calls, content parts and a
tokenizer that adds a BOS. The tiny tokenizer spells text byte by byte, so every character
is a token and the attribution can be read back exactly."""

from __future__ import annotations

import json

import pytest
from prl_renderers.tokenizer import RendererError

CONTENT = (
    "{% macro text(c) %}{% if c is string %}{{ c }}{% elif c %}{% for p in c %}"
    "{% if p is mapping %}{{ p.text or '' }}{% else %}{{ p }}{% endif %}{% endfor %}{% endif %}{% endmacro %}"
)
CALLS = (
    "{% macro calls(m) %}{% for tc in m.tool_calls or [] %}{% set a = tc.function.arguments %}"
    "{{ '[' + tc.function.name + '(' }}{% if a is mapping %}{% for k, v in a.items() %}{{ k + '=' + v }}"
    "{% endfor %}{% else %}{{ a }}{% endif %}{{ ')]' }}{% endfor %}{% endmacro %}"
)
# Messages follow each other with no header: the first one starts at character 0.
RAW = (
    CONTENT + CALLS + "{% for m in messages %}"
    "{% if m.role == 'assistant' %}{{ '> ' + text(m.content) + calls(m) + '<|endoftext|>' }}"
    "{% else %}{{ text(m.content) }}{% endif %}{{ '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '> ' }}{% endif %}"
)


@pytest.fixture
def template(tiny_dir, tmp_path, unmarked_copy):
    """A copy of the tiny tokenizer with ``chat`` as its template and <|endoftext|> as its EOS."""

    def build(chat: str, name: str = "tok"):
        d = unmarked_copy(tiny_dir, tmp_path / name)
        (d / "chat_template.jinja").write_text(chat)
        cfg = json.loads((d / "tokenizer_config.json").read_text())
        cfg["eos_token"] = "<|endoftext|>"
        (d / "tokenizer_config.json").write_text(json.dumps(cfg))
        return d

    return build


def spans(renderer, rendered):
    """(text, message index, role) of each run of consecutive tokens with one owner."""
    out = []
    for tok, index, role in zip(rendered.token_ids, rendered.message_index, rendered.roles, strict=True):
        if out and out[-1][1:] == [index, role]:
            out[-1][0].append(tok)
        else:
            out.append([[tok], index, role])
    return [(renderer.tokenizer.decode(toks), index, role) for toks, index, role in out]


ECHO = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hi"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hi"},
]


def test_an_echoed_reply_and_a_repeated_question_each_own_their_own_text(make, template):
    r = make("default", template(RAW))
    out = r.render(ECHO[:3], add_generation_prompt=True)
    assert spans(r, out) == [
        ("hi", 0, "user"),  # at character 0 of the conversation
        ("\n> ", -1, "template"),  # the generation prompt: the model did not write it
        ("hi<|endoftext|>", 1, "assistant"),
        ("\n", -1, "template"),
        ("hi", 2, "user"),
        ("\n> ", -1, "template"),
    ]
    assert r.render_ids(ECHO[:3], add_generation_prompt=True) == out.token_ids
    whole = r.render(ECHO)
    assert r.render_ids(ECHO) == whole.token_ids  # no generation prompt unless asked
    assert spans(r, whole)[2:] == [
        ("hi<|endoftext|>", 1, "assistant"),  # up to its own stop token, not the next reply's
        ("\n", -1, "template"),
        ("hi", 2, "user"),
        ("\n> ", -1, "template"),
        ("hi<|endoftext|>", 3, "assistant"),
        ("\n", -1, "template"),
    ]


def test_a_system_prompt_the_template_drops_owns_nothing_even_when_the_user_quotes_it(make, template):
    skip_system = "{% if m.role == 'system' %}{% elif m.role == 'assistant' %}"
    r = make("default", template(RAW.replace("{% if m.role == 'assistant' %}", skip_system)))
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "be brief, please"},
        {"role": "assistant", "content": "ok"},
    ]
    assert spans(r, r.render(msgs)) == [
        ("\n", -1, "template"),
        ("be brief, please", 1, "user"),
        ("\n> ", -1, "template"),
        ("ok<|endoftext|>", 2, "assistant"),
        ("\n", -1, "template"),
    ]
    # nor does it own template text further on that happens to match it
    r = make("default", template(RAW.replace("{% if m.role == 'assistant' %}", skip_system).replace(
        "'<|endoftext|>' }}", "'<|endoftext|> [end]' }}"), name="footer"))  # fmt: skip
    msgs[0]["content"] = "[end]"
    assert spans(r, r.render(msgs))[-2:] == [("ok<|endoftext|>", 2, "assistant"), (" [end]\n", -1, "template")]


def test_a_message_whose_text_is_in_the_turn_before_it_owns_its_own_copy(make, template):
    r = make("default", template(RAW.replace("'<|endoftext|>' }}", "'<|endoftext|> [end]' }}")))
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "end"},
    ]
    assert spans(r, r.render(msgs))[2:] == [
        ("ok<|endoftext|>", 1, "assistant"),
        (" [end]\n", -1, "template"),
        ("end", 2, "user"),
        ("\n", -1, "template"),
    ]


def test_a_message_ending_in_letters_of_the_end_of_turn_token_owns_its_text(make, tiny_dir):
    r = make("default", tiny_dir)  # ChatML: a turn ends with <|im_end|>, which spells "end"
    msgs = [{"role": "user", "content": "end"}, {"role": "assistant", "content": "ok"}]
    assert spans(r, r.render(msgs))[:3] == [
        ("<|im_start|>user\n", -1, "template"),
        ("end", 0, "user"),
        ("<|im_end|>\n<|im_start|>assistant\n", -1, "template"),
    ]


# The last user message is marked differently from earlier ones, so rendering a prefix does
# not reproduce the start of the whole conversation: ownership falls back to searching for
# each message's text after the previous message.
LAST = CONTENT + (
    "{% set ns = namespace(last=-1) %}{% for m in messages %}{% if m.role == 'user' %}"
    "{% set ns.last = loop.index0 %}{% endif %}{% endfor %}{% for m in messages %}"
    "{% if m.role == 'assistant' %}{{ '> ' + text(m.content) + '<|endoftext|>' }}"
    "{% else %}{{ ('Q: ' if loop.index0 == ns.last else 'user: ') + text(m.content) }}{% endif %}{{ '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '> ' }}{% endif %}"
)


def test_a_template_that_rewrites_earlier_turns_still_attributes_each_message(make, template):
    r = make("default", template(LAST))
    assert spans(r, r.render(ECHO)) == [
        ("user: ", -1, "template"),
        ("hi", 0, "user"),
        ("\n> ", -1, "template"),
        ("hi<|endoftext|>", 1, "assistant"),
        ("\nQ: ", -1, "template"),
        ("hi", 2, "user"),
        ("\n> ", -1, "template"),
        ("hi<|endoftext|>", 3, "assistant"),
        ("\n", -1, "template"),
    ]
    # an empty message owns nothing and the search goes on from where it was
    msgs = [{"role": "user", "content": ""}, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "go"}]
    assert spans(r, r.render(msgs)) == [
        ("user: \n> ", -1, "template"),
        ("hi<|endoftext|>", 1, "assistant"),
        ("\nQ: ", -1, "template"),
        ("go", 2, "user"),
        ("\n", -1, "template"),
    ]


def test_without_a_generation_prompt_the_model_owns_the_header_it_writes(make, template):
    chat = (
        "{% for m in messages %}{{ ('A: ' if m.role == 'assistant' else 'U: ') + m.content }}"
        "{% if m.role == 'assistant' %}{{ '<|endoftext|>' }}{% endif %}{{ '\\n' }}{% endfor %}"
    )
    r = make("default", template(chat))
    msgs = [{"role": "user", "content": "yo"}, {"role": "assistant", "content": "ok"}]
    assert spans(r, r.render(msgs))[3:] == [("A: ok<|endoftext|>", 1, "assistant"), ("\n", -1, "template")]


def test_a_conversation_opening_with_the_assistant_gives_it_its_reply(make, template):
    bare = (
        "{% for m in messages %}{% if m.role == 'assistant' %}{{ m.content + '<|endoftext|>' }}"
        "{% else %}{{ 'U: ' + m.content }}{% endif %}{{ '\\n' }}{% endfor %}"
    )
    msgs = [{"role": "assistant", "content": "say <|endoftext|>"}, {"role": "user", "content": "yo"}]
    r = make("default", template(bare, name="bare"))
    # its end is the stop token after its text, not the one its text quotes
    owned = ("say <|endoftext|><|endoftext|>", 0, "assistant")
    assert spans(r, r.render(msgs))[:2] == [owned, ("\nU: ", -1, "template")]
    r = make("default", template(RAW, name="raw"))
    assert spans(r, r.render(msgs))[:2] == [("> ", -1, "template"), owned]


def test_with_no_stop_token_in_the_template_each_reply_owns_its_text(make, template):
    bare = "{% for m in messages %}{{ ('' if m.role == 'assistant' else 'U: ') + m.content + '\\n' }}{% endfor %}"
    r = make("default", template(bare))
    msgs = [
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "yo"},
        {"role": "assistant", "content": "ok"},
    ]
    assert spans(r, r.render(msgs)) == [
        ("hi", 0, "assistant"),
        ("\nU: ", -1, "template"),
        ("yo", 1, "user"),
        ("\n", -1, "template"),
        ("ok", 2, "assistant"),
        ("\n", -1, "template"),
    ]


def test_a_reply_the_template_trims_still_ends_at_its_own_stop_token(make, template):
    r = make("default", template(RAW.replace("'> ' + text(m.content)", "'> ' + (text(m.content) | trim)")))
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "hi" + " " * 30},
        {"role": "user", "content": "r"},
        {"role": "assistant", "content": "ok"},
    ]
    assert spans(r, r.render(msgs))[2:4] == [("hi<|endoftext|>", 1, "assistant"), ("\n", -1, "template")]


def test_a_turn_closed_by_a_token_that_is_not_a_stop_ends_with_its_turn(make, template):
    # Like Llama 3.1 closing a tool call with <|eom_id|>: the call's turn carries no stop token,
    # and its reply must not run on to the stop token of the next reply.
    r = make(
        "default", template(RAW.replace("'<|endoftext|>' }}", "('<|im_end|>' if m.tool_calls else '<|endoftext|>') }}"))
    )
    call = {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": {"word": "cat"}}}
    msgs = [
        {"role": "user", "content": "cat?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c0", "content": "feline"},
        {"role": "assistant", "content": "ok"},
    ]
    assert spans(r, r.render(msgs)) == [
        ("cat?", 0, "user"),
        ("\n> ", -1, "template"),
        ("[lookup(word=cat)]<|im_end|>\n", 1, "assistant"),
        ("feline", 2, "tool"),
        ("\n> ", -1, "template"),
        ("ok<|endoftext|>", 3, "assistant"),
        ("\n", -1, "template"),
    ]


def test_a_reply_to_a_prompt_that_opened_the_reasoning_is_parsed_as_reasoning(make, tiny_dir):
    r = make("default", tiny_dir)
    tok = r.tokenizer
    prompt = tok.encode("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n", add_special_tokens=False)
    sampled = tok.encode("hm\n</think>\n\nok", add_special_tokens=False) + r.get_stop_token_ids()[:1]
    msg = r.parse_response(sampled, prompt_ids=prompt)
    assert msg["reasoning_content"].strip() == "hm" and msg["content"].strip() == "ok"


def test_every_token_carries_its_messages_role_and_a_message_without_one_has_none(make, template):
    r = make("default", template(RAW))
    msgs = [{"content": "note"}, {"role": "system", "content": "be brief"}, {"role": "assistant", "content": "ok"}]
    assert spans(r, r.render(msgs)) == [
        ("note", 0, ""),
        ("\n", -1, "template"),
        ("be brief", 1, "system"),
        ("\n> ", -1, "template"),
        ("ok<|endoftext|>", 2, "assistant"),
        ("\n", -1, "template"),
    ]


def test_content_given_as_parts_is_owned_as_its_text(make, template):
    r = make("default", template(RAW))
    parts = [{"type": "text", "text": "ab"}, {"type": "image_url"}, "cd"]
    msgs = [{"role": "user", "content": parts}, {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}]
    assert spans(r, r.render(msgs)) == [
        ("abcd", 0, "user"),
        ("\n> ", -1, "template"),
        ("ok<|endoftext|>", 1, "assistant"),
        ("\n", -1, "template"),
    ]


def test_a_tool_call_turn_owns_the_calls_it_made_with_arguments_given_as_json_text(make, template):
    r = make("default", template(RAW))
    call = {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "cat"}'}}
    raw = {"id": "c1", "type": "function", "function": {"name": "shout", "arguments": "not json"}}
    msgs = [
        {"role": "user", "content": "cat?"},
        {"role": "assistant", "content": None, "tool_calls": [call, raw]},
        {"role": "tool", "tool_call_id": "c0", "content": "feline"},
        {"role": "assistant", "content": "a feline"},
    ]
    assert spans(r, r.render(msgs)) == [
        ("cat?", 0, "user"),
        ("\n> ", -1, "template"),
        # the template iterates the decoded arguments; a non-JSON string is printed as given
        ("[lookup(word=cat)][shout(not json)]<|endoftext|>", 1, "assistant"),
        ("\n", -1, "template"),
        ("feline", 2, "tool"),
        ("\n> ", -1, "template"),
        ("a feline<|endoftext|>", 3, "assistant"),
        ("\n", -1, "template"),
    ]
    assert msgs[1]["tool_calls"][0]["function"]["arguments"] == '{"word": "cat"}'  # the caller's copy is kept


def test_a_generation_eos_that_is_not_the_tokenizers_eos_ends_the_turn_and_the_sample(make, template, tiny_dir):
    # Like Llama 3: the tokenizer's EOS is <|endoftext|>, a turn ends with <|im_end|>, which
    # generation_config.json lists as an EOS too.
    chat = RAW.replace("'<|endoftext|>'", "'<|im_end|>'")
    d = template(chat)
    r = make("default", d)
    tok = r.tokenizer
    end_text, im_end = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [im_end, end_text]}))
    r = make("default", d)
    assert r.get_stop_token_ids() == [end_text, im_end]  # the tokenizer's first, no repeats
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a<|endoftext|>b"}]
    # the turn's end is the first stop token after the content, not a stop the content holds
    assert spans(r, r.render(msgs))[2] == ("a<|endoftext|>b<|im_end|>", 1, "assistant")
    sampled = tok.encode("ok", add_special_tokens=False) + [im_end] + tok.encode("junk", add_special_tokens=False)
    assert r.parse_response(sampled)["content"] == "ok"


def test_a_template_that_writes_the_bos_the_tokenizer_also_adds_gets_it_once(make, template):
    d = template("{{ '<|im_start|>' }}" + RAW)
    spec = json.loads((d / "tokenizer.json").read_text())
    bos = next(t["id"] for t in spec["added_tokens"] if t["content"] == "<|im_start|>")
    single = [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": single,
        "pair": [*single, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|im_start|>": {"id": "<|im_start|>", "ids": [bos], "tokens": ["<|im_start|>"]}},
    }
    (d / "tokenizer.json").write_text(json.dumps(spec))
    r = make("default", d)
    msgs = [{"role": "user", "content": "q"}]
    out = r.render(msgs, add_generation_prompt=True)
    assert out.token_ids.count(bos) == 1
    assert r.render_ids(msgs, add_generation_prompt=True) == out.token_ids
    assert spans(r, out) == [("<|im_start|>", -1, "template"), ("q", 0, "user"), ("\n> ", -1, "template")]


def test_a_tokenizer_without_a_chat_template_is_refused_with_the_way_out(make, tiny_dir, tmp_path, unmarked_copy):
    d = unmarked_copy(tiny_dir, tmp_path / "bare")
    (d / "chat_template.jinja").unlink()
    with pytest.raises(RendererError) as info:
        make("default", d)
    assert str(info.value) == (
        f"renderer 'default': tokenizer {str(d)!r} has no chat template; pick a renderer family by name"
    )


def test_an_unknown_parser_is_named(make, tiny_dir):
    with pytest.raises(RendererError) as info:
        make("default", tiny_dir, tool_parser="nope")
    message = str(info.value)
    assert message.startswith("renderer 'default': bad tool_parser/reasoning_parser: ")
    assert "'nope'" in message


def test_whitespace_a_byte_level_tokenizer_trims_from_its_offsets_keeps_its_owner(make, template):
    # Byte-level tokenizers with trim_offsets give a whitespace-only token an empty span at the
    # end of its characters; the reply's inner and the question's trailing spaces are still theirs.
    d = template(RAW)
    spec = json.loads((d / "tokenizer.json").read_text())
    spec["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    (d / "tokenizer.json").write_text(json.dumps(spec))
    r = make("default", d)
    msgs = [{"role": "user", "content": " hi "}, {"role": "assistant", "content": "def f():\n    return 1"}]
    assert spans(r, r.render(msgs)) == [
        (" hi ", 0, "user"),
        ("\n> ", -1, "template"),
        ("def f():\n    return 1<|endoftext|>", 1, "assistant"),
        ("\n", -1, "template"),
    ]


def test_a_token_across_the_end_of_a_message_belongs_to_the_message(make, template):
    # A BPE merge can join a message's last character to the template's next one ("i" + "\n"):
    # the token takes the owner of its first character.
    d = template(RAW)
    spec = json.loads((d / "tokenizer.json").read_text())
    spec["model"]["vocab"]["iĊ"] = 4096  # past every id in use
    spec["model"]["merges"] = [["i", "Ċ"]]
    (d / "tokenizer.json").write_text(json.dumps(spec))
    r = make("default", d)
    out = r.render([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}])
    assert out.token_ids[1] == 4096  # "i\n" is one token
    assert spans(r, out) == [
        ("hi\n", 0, "user"),
        ("> ", -1, "template"),
        ("ok<|endoftext|>", 1, "assistant"),
        ("\n", -1, "template"),
    ]


def test_a_default_renderer_handed_to_a_remote_env_server_is_rebuilt_the_same(make, tiny_dir):
    from prl.envs.protocol import renderer_descriptor

    r = make("default", tiny_dir, enable_thinking=False)
    spec = renderer_descriptor(r)
    assert spec["tokenizer"] == str(tiny_dir)
    rebuilt = make(spec["name"], spec["tokenizer"], **{k: v for k, v in spec["config"].items() if k != "name"})
    user = [{"role": "user", "content": "q"}]
    assert rebuilt.render_ids(user, add_generation_prompt=True) == r.render_ids(user, add_generation_prompt=True)
    assert r.tokenizer.decode(rebuilt.render_ids(user, add_generation_prompt=True)).endswith("<think>\n\n</think>\n\n")


def test_a_user_naming_a_tool_owns_their_words_not_the_tool_list(make, tiny_dir):
    # The tiny model's template (Qwen3's) lists the tools inside the system turn.
    tools = [{"type": "function", "function": {"name": "lookup", "description": "Find a word.", "parameters": {}}}]
    r = make("default", tiny_dir)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "lookup"}]
    out = r.render(msgs, tools)
    assert [(text, i) for text, i, _ in spans(r, out) if i >= 0] == [("Be brief.", 0), ("lookup", 1)]
    before, *rest = spans(r, out)[-3:]
    assert before[1] == -1 and before[0].endswith("<|im_start|>user\n")
    assert rest == [("lookup", 1, "user"), ("<|im_end|>\n", -1, "template")]  # its turn, not the tool list's name
