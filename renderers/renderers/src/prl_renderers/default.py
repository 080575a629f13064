"""``default``: any tokenizer's own Hugging Face chat template, with per-token attribution.

The template is opaque, so attribution is recovered from text. With ``full`` the rendered
conversation and ``P(k)`` the rendering of its first ``k`` messages:

* message ``i`` occupies ``[len(P(i)), len(P(i+1)))`` of ``full`` when ``P(i+1)`` is a
  prefix of ``full`` (the template is stable on that prefix);
* inside it, a system/user/tool message owns the characters of its ``content``;
* an assistant message owns what the model would sample: from the end of ``P(i)`` rendered
  with the generation prompt up to and including the first stop token after its content;
* every other character (role headers, separators, the generation prompt) is template.

Where a template rewrites earlier turns (the prefix test fails), the message's content is
searched for after the previous message instead. Tokens take the owner of their first
character, through the fast tokenizer's offsets (a whitespace token whose offsets a
byte-level tokenizer trimmed to nothing, the owner of its last character).

Parsing uses the ``renderers`` package's generic parser with the configured
``tool_parser`` / ``reasoning_parser``. Unknown extra keys in ``[renderer]`` are forwarded
to the template (``enable_thinking = false``). Bridging is not possible without knowing the
template's turn structure, so ``bridge_to_next_turn`` always asks for a re-render.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict

from prl.contracts import Rendered, Renderer, RendererConfig
from prl_renderers.convert import TEMPLATE_ROLE, to_message
from prl_renderers.tokenizer import RendererError, generation_eos_ids, resolve_tokenizer


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return ""


def _decode_arguments(messages: list[dict]) -> list[dict]:
    """Tool-call arguments given as JSON strings as dicts: several templates iterate them."""
    out = []
    for m in messages:
        calls = m.get("tool_calls") if isinstance(m, dict) else None
        if not calls:
            out.append(m)
            continue
        fixed = []
        for tc in calls:
            fn = dict(tc.get("function") or {})
            if isinstance(fn.get("arguments"), str):
                try:
                    fn["arguments"] = json.loads(fn["arguments"])
                except ValueError:
                    pass  # a non-JSON string stays a string; templates print it as is
            fixed.append({**tc, "function": fn} if fn else tc)
        out.append({**m, "tool_calls": fixed})
    return out


class DefaultRenderer(Renderer):
    """The tokenizer's chat template, attribution from rendering message prefixes."""

    name: ClassVar[str] = "default"

    class Config(RendererConfig):
        """``[renderer] name = "default"``; other keys are passed to the chat template."""

        model_config = ConfigDict(extra="allow")

        name: Literal["default"] = "default"
        """Selects the generic chat-template renderer."""

        tool_parser: str | None = None
        """Tool-call parser of the renderers package ('qwen3', 'qwen3.5', 'glm', 'deepseek-v3'), or None for none."""

        reasoning_parser: str | None = None
        """Reasoning parser of the renderers package ('think'), or None to only split at </think> tokens."""

    def __init__(self, config: RendererConfig, tokenizer: Any) -> None:
        tok, path = resolve_tokenizer(tokenizer)
        super().__init__(config, path)
        self.tokenizer = tok
        if not getattr(tok, "chat_template", None):
            raise RendererError(
                f"renderer 'default': tokenizer {path!r} has no chat template; pick a renderer family by name"
            )
        self.template_kwargs = dict(config.model_extra or {})
        from renderers.default import DefaultRenderer as PackageDefault

        from renderers import DefaultRendererConfig

        try:
            parsers = DefaultRendererConfig(tool_parser=config.tool_parser, reasoning_parser=config.reasoning_parser)
            self.impl = PackageDefault(tok, parsers)
        except (KeyError, ValueError) as exc:
            raise RendererError(f"renderer 'default': bad tool_parser/reasoning_parser: {exc}") from None
        stops = list(self.impl.get_stop_token_ids()) + generation_eos_ids(path)
        self._stops = list(dict.fromkeys(stops))
        self._stop_text = [t for t in tok.convert_ids_to_tokens(self._stops) if t]

    def _text(self, messages: list[dict], tools: list[dict] | None, generation: bool) -> str:
        kwargs = {**self.template_kwargs, "add_generation_prompt": generation, "tokenize": False}
        if tools:
            kwargs["tools"] = tools
        return self.tokenizer.apply_chat_template(_decode_arguments(messages), **kwargs)

    def _try_text(self, messages: list[dict], tools: list[dict] | None, generation: bool) -> str | None:
        try:
            return self._text(messages, tools, generation)
        except Exception:  # templates may reject some prefixes (e.g. must end with a user turn)
            return None

    def render(
        self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False
    ) -> Rendered:
        full = self._text(messages, tools, add_generation_prompt)
        owner = self._char_owners(messages, tools, full)
        enc = self.tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
        index, roles = [], []
        for start, end in enc["offset_mapping"]:
            # A byte-level tokenizer that trims offsets gives a whitespace-only token the empty
            # span (end, end) just past its characters: it takes the owner of its last one.
            i = owner[start if end > start else end - 1]
            index.append(i)
            roles.append(str(messages[i].get("role", "")) if i >= 0 else TEMPLATE_ROLE)
        return Rendered(token_ids=list(enc["input_ids"]), message_index=index, roles=roles)

    def _char_owners(self, messages: list[dict], tools: list[dict] | None, full: str) -> list[int]:
        owner = [-1] * len(full)
        cursor = 0
        for i, _msg in enumerate(messages):
            prefix = self._try_text(messages[: i + 1], tools, False)
            stop = len(prefix) if prefix is not None and full.startswith(prefix) else None
            limit = stop if stop is not None else len(full)
            span = self._owned_span(messages, i, tools, full, cursor, limit)
            if span is not None:
                owner[span[0] : span[1]] = [i] * (span[1] - span[0])
            cursor = stop if stop is not None else (span[1] if span else cursor)
        return owner

    def _owned_span(self, messages: list[dict], i: int, tools, full: str, lo: int, hi: int) -> tuple[int, int] | None:
        msg = messages[i]
        body = _text_of(msg.get("content"))
        at = full.find(body, lo, hi) if body else -1
        if msg.get("role") != "assistant":
            return (at, at + len(body)) if at >= 0 else None
        opened = self._try_text(messages[:i], tools, True) if i > 0 else None
        # The model's turn starts where the generation prompt of the preceding messages ends.
        start = len(opened) if opened is not None and full.startswith(opened) and lo <= len(opened) <= hi else at
        if start < 0:
            return None
        after = max(start, at + len(body)) if at >= 0 else start
        ends = [full.find(t, after, hi) for t in self._stop_text]
        ends = [(e, len(t)) for e, t in zip(ends, self._stop_text, strict=False) if e >= 0]
        if ends:
            e, n = min(ends)
            return start, e + n
        return start, (at + len(body) if at >= 0 else hi)

    def render_ids(
        self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False
    ) -> list[int]:
        text = self._text(messages, tools, add_generation_prompt)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def parse_response(
        self, token_ids: list[int], tools: list[dict] | None = None, prompt_ids: list[int] | None = None
    ) -> dict[str, Any]:
        ids = list(token_ids)
        for k, t in enumerate(ids):
            if t in self._stops:
                ids = ids[:k]
                break
        return to_message(self.impl.parse_response(ids, tools=tools, prompt_ids=prompt_ids))

    def get_stop_token_ids(self) -> list[int]:
        return list(self._stops)
