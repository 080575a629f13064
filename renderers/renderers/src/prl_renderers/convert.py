"""Translate between the ``renderers`` package's result types and prl's contract types.

Attribution rule (``to_rendered``): a token belongs to message ``i`` only when it comes
from that message's own data, i.e. the ``renderers`` ``is_content`` flag: the body of a
system/user/tool message; for an assistant message everything the model samples (think
block, text, tool calls and the closing end-of-turn token). Role headers, separators and
the generation prompt are template tokens (index -1, role ``"template"``). A loss mask over
a role's tokens therefore trains exactly what the model would emit, and chat templates that
rewrite earlier turns cannot shift it. Renderers that give no ``is_content`` fall back to
``sampled_mask`` for assistant tokens and to plain message attribution otherwise.
"""

from __future__ import annotations

import json
from typing import Any

from prl.contracts import Rendered

TEMPLATE_ROLE = "template"


def to_rendered(tokens: Any, messages: list[dict]) -> Rendered:
    """A ``renderers.RenderedTokens`` as a prl ``Rendered``."""
    content = list(tokens.is_content or [])
    sampled = list(tokens.sampled_mask or [])
    index: list[int] = []
    roles: list[str] = []
    for k, i in enumerate(tokens.message_indices):
        role = str(messages[i].get("role", "")) if 0 <= i < len(messages) else ""
        if i >= 0 and content:
            keep = content[k]
        elif i >= 0 and sampled and role == "assistant":
            keep = sampled[k]
        else:
            keep = i >= 0
        index.append(i if keep else -1)
        roles.append(role if keep else TEMPLATE_ROLE)
    return Rendered(token_ids=list(tokens.token_ids), message_index=index, roles=roles)


def to_message(parsed: Any) -> dict[str, Any]:
    """A ``renderers.ParsedResponse`` as an OpenAI-style assistant message.

    Only cleanly parsed tool calls become ``tool_calls`` (arguments as a JSON string, as the
    OpenAI API sends them); malformed attempts are kept under ``invalid_tool_calls`` with
    their raw text and parse status so a reward can penalise them.
    """
    calls: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = []
    for n, tc in enumerate(parsed.tool_calls or []):
        if str(tc.status) == "ok" and tc.name:
            args = tc.arguments
            if not isinstance(args, str):
                args = json.dumps(args or {}, ensure_ascii=False)
            function = {"name": tc.name, "arguments": args}
            calls.append({"id": tc.id or f"call_{n}", "type": "function", "function": function})
        else:
            invalid.append({"raw": tc.raw, "status": str(tc.status), "name": tc.name})
    msg: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    msg["reasoning_content"] = parsed.reasoning_content
    if calls:
        msg["tool_calls"] = calls
    if invalid:
        msg["invalid_tool_calls"] = invalid
    return msg


def bridge_suffix(prev_prompt: list[int], prev_completion: list[int], full: list[int] | None) -> list[int] | None:
    """The ids to append after ``prev_prompt + prev_completion`` so the sequence equals
    ``full``, or None when ``full`` does not extend that sequence (the caller re-renders).

    ``full`` may drop tokens the engine produced after the end-of-turn token; that cannot be
    expressed as an append, so it is None too.
    """
    if full is None:
        return None
    prev = [*prev_prompt, *prev_completion]
    if full[: len(prev)] != prev:
        return None
    return full[len(prev) :]
