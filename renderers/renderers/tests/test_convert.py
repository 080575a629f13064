"""The translation from the renderers package's results to prl's: which token is attributed
to which message (the SFT loss mask trains a role's attributed tokens, so a template token
wrongly attributed to the assistant would be trained on), and what a parsed reply becomes."""

from __future__ import annotations

import json
from types import SimpleNamespace

from prl_renderers.convert import TEMPLATE_ROLE, to_message, to_rendered

MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ih"}]
T = TEMPLATE_ROLE


def tokens(indices: list[int], is_content: list[bool] | None = None, sampled: list[bool] | None = None):
    return SimpleNamespace(token_ids=list(range(100, 100 + len(indices))), message_indices=indices,
                           is_content=is_content, sampled_mask=sampled)  # fmt: skip


def test_content_flags_decide_attribution_for_every_role():
    out = to_rendered(tokens([-1, 0, 0, 1, 1, 1], [False, False, True, False, True, True]), MESSAGES)
    assert out.message_index == [-1, -1, 0, -1, 1, 1]
    assert out.roles == [T, T, "user", T, "assistant", "assistant"]
    assert out.token_ids == [100, 101, 102, 103, 104, 105]


def test_without_content_flags_the_sampled_mask_decides_for_the_assistant_only():
    out = to_rendered(tokens([-1, 0, 0, 1, 1], sampled=[False, False, False, False, True]), MESSAGES)
    assert out.message_index == [-1, 0, 0, -1, 1]
    assert out.roles == [T, "user", "user", T, "assistant"]


def test_a_conversation_opening_with_the_assistant_trains_only_its_sampled_tokens():
    out = to_rendered(tokens([0, 0, 1], sampled=[False, True, False]), [MESSAGES[1], MESSAGES[0]])
    assert out.message_index == [-1, 0, 1] and out.roles == [T, "assistant", "user"]


def test_without_flags_every_message_token_is_its_messages():
    out = to_rendered(tokens([-1, 0, 1, 1]), MESSAGES)
    assert out.message_index == [-1, 0, 1, 1]
    assert out.roles == [T, "user", "assistant", "assistant"]


def test_an_index_past_the_messages_or_a_message_without_role_has_an_empty_role():
    out = to_rendered(tokens([0, 1, 2]), [{"content": "x"}, MESSAGES[1]])
    assert out.message_index == [0, 1, 2] and out.roles == ["", "assistant", ""]


def call(status="ok", name="lookup", arguments=None, id=None, raw=""):
    return SimpleNamespace(status=status, name=name, arguments=arguments, id=id, raw=raw)


def test_a_parsed_reply_becomes_an_openai_message():
    parsed = SimpleNamespace(
        content="done",
        reasoning_content="think",
        tool_calls=[
            call(arguments={"word": "café"}, id="c7"),
            call(arguments='{"n": 1}'),
            call(arguments=None),
            call(status="invalid_json", raw="<tool_call>{oops", name="lookup"),
            call(status="ok", name="", raw="<tool_call>{}"),
        ],
    )
    msg = to_message(parsed)
    assert msg["role"] == "assistant" and msg["content"] == "done" and msg["reasoning_content"] == "think"
    first, second, third = msg["tool_calls"]
    assert first == {"id": "c7", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "café"}'}}
    assert second["id"] == "call_1" and second["function"]["arguments"] == '{"n": 1}'
    assert third["id"] == "call_2" and json.loads(third["function"]["arguments"]) == {}
    assert msg["invalid_tool_calls"] == [
        {"raw": "<tool_call>{oops", "status": "invalid_json", "name": "lookup"},
        {"raw": "<tool_call>{}", "status": "ok", "name": ""},
    ]


def test_a_plain_reply_has_no_tool_call_keys():
    msg = to_message(SimpleNamespace(content="ok", reasoning_content=None, tool_calls=None))
    assert msg == {"role": "assistant", "content": "ok", "reasoning_content": None}
