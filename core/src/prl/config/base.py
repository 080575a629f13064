"""Config base classes: every config model, a plugin's nested ``Config`` and its ``build``.

Every config model forbids extra keys and reads its field docs from attribute docstrings.
Models are ``defer_build``: plugin unions (:mod:`prl.config.unions`) are composed when a
schema is first built, and :func:`rebuild_configs` recomposes them after the set of
installed plugins changes. This module imports nothing else of prl, so contracts and the
plugin manager can both build on it without an import circle.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class PrlModel(BaseModel):
    """Base of every prl config model."""

    model_config = ConfigDict(
        extra="forbid",
        use_attribute_docstrings=True,
        defer_build=True,
        validate_default=False,
        protected_namespaces=(),
    )


class ComposedSection:
    """Schema hook of a section whose model the installed plugins decide (``[monitors]``, a
    trainer's or a launcher's own sections). ``model()`` is that model: validation builds its
    schema, and help, did-you-mean and the generated docs list its fields."""

    def model(self) -> type[PrlModel]:
        raise NotImplementedError

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return handler.generate_schema(self.model())


# Config class -> the plugin class that nests it (filled by prl.contracts.base.Plugin).
_OWNERS: dict[type, type] = {}


class PluginConfigBase(PrlModel):
    """Base of a plugin's nested ``Config``: carries the tag that selects the plugin.

    ``config.build(**runtime)`` constructs the plugin class this config is nested in, so
    callers never look a class up by its tag: ``config.algo.build()``,
    ``config.loss.build()``, ``renderer_config.build(tokenizer=path)``.
    """

    @classmethod
    def plugin_class(cls) -> type:
        """The plugin class that nests this config."""
        owner = _OWNERS.get(cls)
        if owner is None:
            raise TypeError(f"{cls.__qualname__} is not the Config of any plugin class")
        return owner

    def build(self, **runtime: Any) -> Any:
        """The plugin instance for this config; ``runtime`` holds what is only known at run
        time (a tokenizer path, a run directory), never a config field."""
        owner = self.plugin_class()
        clash = sorted(set(runtime) & set(type(self).model_fields))
        if clash:
            raise TypeError(
                f"{owner.__qualname__}.build(): {', '.join(clash)} are config fields, not runtime arguments"
            )
        return owner(self, **runtime)


def bind_config(config_cls: type, owner: type) -> None:
    """Make ``config_cls.build()`` construct ``owner`` (the first class to nest it wins)."""
    if isinstance(config_cls, type) and issubclass(config_cls, PluginConfigBase):
        _OWNERS.setdefault(config_cls, owner)


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
