"""What shape a config field has: bool, list, dict, nested model(s) or a scalar.

The CLI parser uses this to decide how many tokens a flag takes, and help and error
messages use it to list a group's fields. Plugin unions expand to the installed variants.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from prl.config.base import ComposedSection, PrlModel
from prl.config.unions import _PluginUnion


@dataclass
class Shape:
    kind: Literal["bool", "list", "dict", "model", "scalar", "json"]
    optional: bool = False
    models: list[type[BaseModel]] = field(default_factory=list)
    plugin_kind: str | None = None
    list_of_models: bool = False
    passthrough: bool = False
    """A dict of another program's arguments (``[inference.vllm]``): any key below it is a
    leaf whose CLI value is JSON-coerced (kind ``json``), since prl does not type it."""


def _strip(tp: Any, meta: list) -> tuple[Any, bool, list]:
    optional = False
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            args = typing.get_args(tp)
            tp, meta = args[0], meta + list(args[1:])
            continue
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            optional = optional or len(args) < len(typing.get_args(tp))
            if len(args) == 1:
                tp = args[0]
                continue
            # a union of several types: a model if every member is one, else a scalar
            stripped = [_strip(a, [])[0] for a in args]
            if all(isinstance(a, type) and issubclass(a, BaseModel) for a in stripped):
                return stripped, optional, meta
            return Any, optional, meta
        return tp, optional, meta


def shape_of(annotation: Any, metadata: list | None = None) -> Shape:
    tp, optional, meta = _strip(annotation, list(metadata or []))
    for m in meta:
        if isinstance(m, _PluginUnion):
            from prl.plugins import get_registry

            models = [cls.Config for cls in get_registry().classes(m.kind).values()]
            return Shape("model", optional, models, plugin_kind=m.kind)
        if isinstance(m, ComposedSection):
            return Shape("model", optional, [m.model()])
    if isinstance(tp, list):
        return Shape("model", optional, tp)
    origin = typing.get_origin(tp)
    if tp is bool:
        return Shape("bool", optional)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return Shape("model", optional, [tp])
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple, set):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        inner = _strip(args[0], [])[0] if args else None
        is_models = isinstance(inner, type) and issubclass(inner, BaseModel)
        return Shape("list", optional, [inner] if is_models else [], list_of_models=is_models)
    if origin is dict or tp is dict:
        return Shape("dict", optional)
    return Shape("scalar", optional)


def fields_of(models: list[type[BaseModel]]) -> dict[str, Shape]:
    """Union of the fields of ``models`` (the variants of a plugin union)."""
    out: dict[str, Shape] = {}
    for model in models:
        for name, info in model.model_fields.items():
            out.setdefault(name, shape_of(info.annotation, info.metadata))
        # Pass-through sections a model accepts besides its fields (InferenceConfig's
        # [inference.<backend type>]); its before-validator folds them into real fields.
        sections = getattr(model, "passthrough_sections", None)
        for name in sections() if callable(sections) else ():
            out.setdefault(name, Shape("dict", optional=True, passthrough=True))
    return out


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    return {name: (info.description or "") for name, info in model.model_fields.items()}


def is_config_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, PrlModel)
