"""schemathesis hooks for test_openapi.py (loaded through ``$SCHEMATHESIS_HOOKS``).

A few rules tie two fields together, which JSON Schema cannot state, so the document only
describes them (and the server refuses a body that breaks one with a 400 naming it). Before
each call this edits a generated body just enough to keep those rules; schemathesis then
revalidates the body against the schema, so a body that was invalid for another reason is
still judged as invalid.
"""

from __future__ import annotations

import json
import os
from typing import Any

import schemathesis

MAX_N = int(os.environ.get("PRL_ST_MAX_N", "256"))  # the server's server.limits.max_n
# Bytes of text one request may carry: the tiny model's byte-level tokenizer makes at most one
# token per byte, so this (plus template overhead) stays within server.limits.max_prompt_tokens.
TEXT_BYTES = int(os.environ.get("PRL_ST_TEXT_BYTES", "512"))
MAX_MESSAGES = 16


def _clip(text: Any, size: int) -> Any:
    if not isinstance(text, str):
        return text
    return text.encode("utf-8", "surrogatepass")[: max(size, 1)].decode("utf-8", "ignore") or "a"


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        return None
    return int(value)


def _completions(body: dict[str, Any]) -> None:
    """n x prompts <= server.limits.max_n; stream: true takes a single prompt; the prompt,
    once tokenized, fits server.limits.max_prompt_tokens."""
    prompt, n = body.get("prompt"), _count(body.get("n", 1))
    if isinstance(prompt, str):
        body["prompt"] = _clip(prompt, TEXT_BYTES)
    if not isinstance(prompt, list) or not prompt or all(_count(p) is not None for p in prompt):
        return  # one prompt: a string or a list of token ids
    prompt = [_clip(p, TEXT_BYTES) for p in prompt]
    keep = 1 if body.get("stream") is True else MAX_N // n if n and 0 < n <= MAX_N else len(prompt)
    body["prompt"] = prompt[: max(keep, 1)]


def _chat(body: dict[str, Any]) -> None:
    """continue_final_message needs text in the final message to continue; the rendered
    messages (and tools) fit server.limits.max_prompt_tokens."""
    messages = body.get("messages")
    if isinstance(messages, list) and messages:
        messages = body["messages"] = messages[:MAX_MESSAGES]
        share = TEXT_BYTES // len(messages)
        for message in messages:
            if isinstance(message, dict) and "content" in message:
                message["content"] = _clip(message["content"], share)
    if isinstance(body.get("tools"), list) and len(json.dumps(body["tools"])) > TEXT_BYTES:
        body["tools"] = []
    if body.get("continue_final_message") is True and isinstance(messages, list) and messages:
        last = messages[-1]
        if not (isinstance(last, dict) and isinstance(last.get("content"), str) and last["content"].strip()):
            body["continue_final_message"] = False


RULES = {"/v1/completions": _completions, "/v1/chat/completions": _chat}


@schemathesis.hook
def before_call(context, case, kwargs) -> None:
    rule = RULES.get(case.operation.path)
    if rule is not None and isinstance(case.body, dict):
        rule(case.body)
