"""The hand-written model families of the ``renderers`` package as prl renderers.

Each family the package registers (``qwen3``, ``llama-3``, ``gpt-oss``, ...) becomes one prl
``Renderer`` subclass whose tag ``name`` is the family name and whose ``Config`` mirrors the
package's typed config field by field (same types and defaults). The package's own
``default`` entry is left out: prl's ``default`` (module ``prl_renderers.default``) is the
generic chat-template renderer, so every tag has exactly one class.

Config validation builds the package's config too, so its cross-field checks (for example
``thinking_retention`` against ``preserve_thinking``) fail when the TOML is loaded, not at
the first rollout.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, create_model, model_validator

from prl.contracts import Rendered, Renderer, RendererConfig
from prl_renderers.convert import bridge_suffix, to_message, to_rendered
from prl_renderers.tokenizer import RendererError, resolve_tokenizer

# One line of documentation per config field of any family, in prl's words. A field the
# package adds in a later release and that is missing here is documented generically.
FIELD_DOCS: dict[str, str] = {
    "thinking_retention": "How much past reasoning stays in context when bridging turns: None follows the "
    "template, 'tool_cycle' keeps it within the current tool cycle, 'all' keeps it across user turns.",
    "enable_thinking": "Let the model reason in a think block; False pre-fills an empty one in the generation prompt.",
    "thinking": "Let the model reason before answering (Kimi K2.5's name for enable_thinking).",
    "add_vision_id": "Number images and videos ('Picture N:') in the prompt, as the template's add_vision_id does.",
    "image_cache_max": "Entries kept in the renderer's processed-image cache.",
    "audio_cache_max": "Entries kept in the renderer's processed-audio cache.",
    "preserve_thinking": "Keep the reasoning of earlier assistant turns instead of stripping it.",
    "preserved_thinking": "Keep reasoning on every earlier assistant turn; None follows the template (on with tools).",
    "reasoning_effort": "Reasoning depth requested from the model, as the template's reasoning_effort kwarg.",
    "clear_thinking": "Strip reasoning from earlier assistant turns.",
    "drop_thinking": "Drop reasoning from earlier assistant turns.",
    "truncate_history_thinking": "Strip reasoning from assistant turns before the last user message.",
    "low_effort": "Ask the model for low reasoning effort.",
    "medium_effort": "Ask the model for medium reasoning effort.",
    "conversation_start_date": "Date written into the system preamble; None uses today's date.",
    "use_system_prompt": "Prepend the model's standard system preamble.",
    "knowledge_cutoff": "Knowledge-cutoff line of the system preamble; None uses the model's default.",
    "model_identity": "Model-identity line of the system preamble.",
    "auto_drop_analysis": "Drop analysis (reasoning) of finished tool cycles from history.",
    "date_string": "Date shown in the system header ('Today Date: ...').",
    "tools_in_user_message": "Put tool definitions in the first user message instead of the system message.",
    "render_assistant_messages_raw": "Emit assistant messages verbatim without re-formatting reasoning.",
    "is_training": "Render supervised targets: keep reasoning on every assistant turn and close the last one.",
    "raw_last_assistant": "Emit a final assistant message as raw text to continue it (prefill).",
    "fallback_strategy": "Template fallback mode; 'reasoning_toolcall_retry' forces high effort and no "
    "generation prompt.",
}


def _upstream_configs() -> dict[str, type]:
    from renderers.configs import _CONFIG_BY_NAME

    return {n: c for n, c in _CONFIG_BY_NAME.items() if n not in ("auto", "default")}


def _class_stem(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace(".", "_").replace("-", "_").split("_")) or "X"


def _make_config(name: str, upstream: type) -> type[RendererConfig]:
    """A prl config class with ``name: Literal[name]`` and the upstream fields."""
    fields: dict[str, Any] = {
        "name": (Literal[name], Field(name, description=f"Selects the '{name}' renderer of the renderers package.")),
    }
    for fname, info in upstream.model_fields.items():
        if fname == "name":
            continue
        doc = FIELD_DOCS.get(fname, f"Template control '{fname}' of the renderers package's '{name}' renderer.")
        fields[fname] = (info.annotation, Field(info.default, description=doc))

    def check_upstream(self):
        to_upstream(self)
        return self

    cls = create_model(
        f"{_class_stem(name)}RendererConfig",
        __base__=RendererConfig,
        __module__=__name__,
        __doc__=f'``[renderer] name = "{name}"``: the renderers package\'s {name} renderer.',
        __validators__={"_check_upstream": model_validator(mode="after")(check_upstream)},
        **fields,
    )
    cls.upstream_config = upstream  # type: ignore[attr-defined]
    return cls


def to_upstream(config: RendererConfig) -> Any:
    """The ``renderers`` package's config equal to a prl family config.

    Only fields set explicitly are passed on, so the package's checks that look at which
    fields were set behave as if it had been configured directly.
    """
    upstream = type(config).upstream_config  # type: ignore[attr-defined]
    data = {k: getattr(config, k) for k in config.model_fields_set if k != "name"}
    try:
        return upstream.model_validate(data)
    except Exception as exc:
        raise ValueError(f"renderer '{config.name}': {_first_error(exc)}") from None


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        e = errors()[0]
        loc = ".".join(str(p) for p in e.get("loc", ()))
        msg = str(e.get("msg", "")).removeprefix("Value error, ")
        return f"{loc}: {msg}" if loc else msg
    return str(exc).splitlines()[0]


class PackageRenderer(Renderer):
    """A prl renderer delegating to one ``renderers`` package renderer object."""

    name: ClassVar[str]

    def __init__(self, config: RendererConfig, tokenizer: Any) -> None:
        tok, path = resolve_tokenizer(tokenizer)
        super().__init__(config, path)
        self.tokenizer = tok
        self.impl = self._build(tok)

    def _build(self, tok: Any) -> Any:
        from renderers import create_renderer

        try:
            return create_renderer(tok, to_upstream(self.config))
        except RendererError:
            raise
        except Exception as exc:
            where = f"renderer '{self.name}' does not fit tokenizer {self.tokenizer_path!r}"
            raise RendererError(f"{where}: {_first_error(exc)}") from exc

    def render(
        self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False
    ) -> Rendered:
        out = self.impl.render(messages, tools=tools, add_generation_prompt=add_generation_prompt)
        return to_rendered(out, messages)

    def render_ids(
        self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False
    ) -> list[int]:
        return list(self.impl.render_ids(messages, tools=tools, add_generation_prompt=add_generation_prompt))

    def parse_response(
        self, token_ids: list[int], tools: list[dict] | None = None, prompt_ids: list[int] | None = None
    ) -> dict[str, Any]:
        return to_message(self.impl.parse_response(list(token_ids), tools=tools, prompt_ids=prompt_ids))

    def get_stop_token_ids(self) -> list[int]:
        return list(self.impl.get_stop_token_ids())

    @property
    def is_prefix_stable(self) -> bool:
        return bool(self.impl.is_prefix_stable)

    def bridge_to_next_turn(
        self,
        prev_prompt_ids: list[int],
        prev_completion_ids: list[int],
        new_messages: list[dict],
        tools: list[dict] | None = None,
    ) -> list[int] | None:
        prompt, completion = list(prev_prompt_ids), list(prev_completion_ids)
        out = self.impl.bridge_to_next_turn(prompt, completion, new_messages, tools=tools)
        return bridge_suffix(prompt, completion, None if out is None else list(out.token_ids))


def _make_renderer(name: str, upstream: type) -> type[PackageRenderer]:
    stem = _class_stem(name)
    config = _make_config(name, upstream)
    cls = type(
        f"{stem}Renderer",
        (PackageRenderer,),
        {"name": name, "Config": config, "__module__": __name__, "__doc__": f"The renderers package's {name}."},
    )
    config.__qualname__ = f"{cls.__name__}.Config"
    return cls


def family_renderers() -> list[type[PackageRenderer]]:
    """One prl renderer class per family of the installed ``renderers`` package."""
    classes = [_make_renderer(n, c) for n, c in sorted(_upstream_configs().items())]
    globals().update({c.__name__: c for c in classes})
    return classes


FAMILIES: list[type[PackageRenderer]] = family_renderers()
