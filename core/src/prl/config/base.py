"""Config base classes and plugin-composed unions.

Every config model forbids extra keys and reads its field docs from attribute docstrings.
A field typed ``PluginConfig["losses"]`` is a discriminated union built from the classes
installed plugins register for that kind; it is composed when the schema is first built
(models are ``defer_build``), and :func:`rebuild_configs` recomposes it after the set of
plugins changes (tests that register plugins inline call it).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, PlainValidator, Tag
from pydantic_core import PydanticCustomError, core_schema

_MISSING_TAG = "__prl_missing_plugin__"


class PrlModel(BaseModel):
    """Base of every prl config model."""

    model_config = ConfigDict(
        extra="forbid",
        use_attribute_docstrings=True,
        defer_build=True,
        validate_default=False,
        protected_namespaces=(),
    )


class PluginConfigBase(PrlModel):
    """Base of a plugin's nested ``Config``: carries the tag that selects the plugin."""


class _PluginUnion:
    """Schema hook: a union of the ``Config`` classes registered for one plugin kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        from prl.plugins import KINDS, get_registry

        key = KINDS[self.kind].tag_attr
        default = KINDS[self.kind].default
        classes = get_registry().classes(self.kind)
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
                    "hint": _provider_hint(self.kind, tag),
                    "installed": ", ".join(sorted(tags)),
                },
            )

        choices = [Annotated[cls.Config, Tag(tag)] for tag, cls in classes.items()]
        choices.append(Annotated[Any, PlainValidator(fail), Tag(_MISSING_TAG)])

        def pick(value: Any) -> str:
            tag = value.get(key, default) if isinstance(value, dict) else getattr(value, key, None)
            if tag is None and len(tags) == 1:
                return tags[0]
            return tag if tag in classes else _MISSING_TAG

        union = Annotated[tuple(choices), Discriminator(pick)]  # type: ignore[valid-type]
        return handler.generate_schema(union)


def _none_installed(kind: str):
    def fail(value: Any) -> Any:
        from prl.plugins import KINDS

        tag = value.get(KINDS[kind].tag_attr) if isinstance(value, dict) else None
        raise PydanticCustomError(
            "plugin_missing",
            "no {label} plugin is installed{hint}",
            {"label": KINDS[kind].label, "hint": _provider_hint(kind, tag)},
        )

    return fail


def _provider_hint(kind: str, tag: Any) -> str:
    from prl.plugins import KNOWN_PROVIDERS

    dist = KNOWN_PROVIDERS.get((kind, tag))
    return f"; install the distribution '{dist}' (pip install -e <repo>/{_folder(dist)})" if dist else ""


def _folder(dist: str) -> str:
    from prl.plugins import KNOWN_FOLDERS

    return KNOWN_FOLDERS.get(dist, dist)


class _PluginConfigFactory:
    def __getitem__(self, kind: str) -> Any:
        return Annotated[PluginConfigBase, _PluginUnion(kind)]


PluginConfig = _PluginConfigFactory()
"""``PluginConfig["losses"]``: the union of installed loss configs, keyed by their tag."""


def all_models(root: type[BaseModel] = PrlModel) -> list[type[BaseModel]]:
    """Every subclass of ``root``, children after parents."""
    seen: list[type[BaseModel]] = []
    stack = [root]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.append(sub)
                stack.append(sub)
    return seen


def rebuild_configs() -> None:
    """Recompose plugin unions after the installed plugins changed.

    Leaves are rebuilt before the models that hold them, so every parent picks up the fresh
    schema of its children.
    """
    models = all_models()
    depth = {m: _depth(m) for m in models}
    for model in sorted(models, key=lambda m: depth[m]):
        if model.__pydantic_complete__:  # deferred, never-built models build lazily later
            model.model_rebuild(force=True)


def _depth(model: type[BaseModel], _seen: frozenset = frozenset()) -> int:
    """Longest chain of nested PrlModel fields below ``model`` (cycles cut)."""
    best = 0
    for child in _nested_models(model):
        if child in _seen or child is model:
            continue
        best = max(best, 1 + _depth(child, _seen | {model}))
    return best


def _nested_models(model: type[BaseModel]) -> list[type[BaseModel]]:
    import typing

    found = []

    def walk(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, PrlModel):
            found.append(tp)
        for arg in typing.get_args(tp):
            walk(arg)

    for field in model.model_fields.values():
        walk(field.annotation)
    return found
