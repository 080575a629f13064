"""Plugin-composed config unions: ``PluginConfig["losses"]``.

A field typed ``PluginConfig["losses"]`` is a discriminated union of the ``Config`` classes
that installed plugins register for that kind, keyed by their tag. When the tag is left out
the installed class that declares ``is_default = True`` is picked; a tag that is not
installed fails validation naming the distribution that provides it (when known).
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Discriminator, PlainValidator, Tag
from pydantic_core import PydanticCustomError, core_schema

from prl.config.base import PluginConfigBase
from prl.known_plugins import install_hint
from prl.plugins import KINDS, get_registry

_MISSING_TAG = "__prl_missing_plugin__"


class _PluginUnion:
    """Schema hook: a union of the ``Config`` classes registered for one plugin kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        key = KINDS[self.kind].tag_attr
        registry = get_registry()
        default = registry.default_tag(self.kind)
        classes = registry.classes(self.kind)
        if not classes:
            return core_schema.no_info_plain_validator_function(_none_installed(self.kind))
        tags = list(classes)

        def fail(value: Any) -> Any:
            tag = value.get(key, default) if isinstance(value, dict) else getattr(value, key, None)
            raise PydanticCustomError(
                "plugin_missing",
                "{label} {key} '{tag}' is not installed{hint} (installed: {installed})",
                {
                    "label": KINDS[self.kind].label,
                    "key": key,
                    "tag": tag,
                    "hint": install_hint(self.kind, tag),
                    "installed": ", ".join(sorted(tags)),
                },
            )

        choices = [Annotated[cls.Config, Tag(tag)] for tag, cls in classes.items()]
        choices.append(Annotated[Any, PlainValidator(fail), Tag(_MISSING_TAG)])

        def pick(value: Any) -> str:
            tag = value.get(key, default) if isinstance(value, dict) else getattr(value, key, None)
            if tag is None and len(tags) == 1:
                return tags[0]
            # a tag that is not a string (a table, a list) is no installed plugin's either
            return tag if isinstance(tag, str) and tag in classes else _MISSING_TAG

        # Union[...] of a runtime tuple: the `X | Y` spelling cannot be built from a list.
        union = Annotated[Union[tuple(choices)], Discriminator(pick)]  # noqa: UP007
        return handler.generate_schema(union)


def _none_installed(kind: str):
    def fail(value: Any) -> Any:
        tag = value.get(KINDS[kind].tag_attr) if isinstance(value, dict) else None
        raise PydanticCustomError(
            "plugin_missing",
            "no {label} plugin is installed{hint}",
            {"label": KINDS[kind].label, "hint": install_hint(kind, tag)},
        )

    return fail


class _PluginConfigFactory:
    def __getitem__(self, kind: str) -> Any:
        return Annotated[PluginConfigBase, _PluginUnion(kind)]


PluginConfig = _PluginConfigFactory()
"""``PluginConfig["losses"]``: the union of installed loss configs, keyed by their tag."""
