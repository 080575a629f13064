"""``--help`` for config commands: one panel per section, every field with type, default and doc.

Panels: "options" for top-level scalars, then ``path: <docstring>`` per nested model,
``path variant: ClassName`` per installed union variant and ``path[*]`` for lists of models.
"""

from __future__ import annotations

import os
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from prl.config.introspect import shape_of


def _type_name(annotation: Any) -> str:
    """A short human type: INT, FLOAT | None, {a,b}, list[str], ..."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Literal:
        return "{" + ",".join(str(a) for a in args) + "}"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if annotation is type(None):
        return "None"
    if origin is not None:
        inner = ", ".join(_type_name(a) for a in args if a is not Ellipsis)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]" if inner else getattr(origin, "__name__", "?")
    name = getattr(annotation, "__name__", str(annotation))
    return name.upper() if name in ("int", "float", "str", "bool") else name


def _default(info: Any) -> str:
    if info.default is not PydanticUndefined:
        return repr(info.default) if not isinstance(info.default, BaseModel) else "{...}"
    if info.default_factory is not None:
        try:
            value = info.default_factory()
        except Exception:  # a factory needing plugins that are not installed
            return "{...}"
        return (
            "{...}" if isinstance(value, BaseModel) else repr(str(value) if isinstance(value, os.PathLike) else value)
        )
    return "required"


def _panels(model: type[BaseModel], path: str, title: str, out: list[tuple[str, list[tuple[str, str, str]]]]) -> None:
    rows: list[tuple[str, str, str]] = []
    nested: list[tuple[str, Any, Any]] = []
    for name, info in model.model_fields.items():
        flag = f"{path}.{name}" if path else name
        shape = shape_of(info.annotation, info.metadata)
        if shape.kind == "model" or shape.list_of_models:
            nested.append((flag, info, shape))
            continue
        doc = (info.description or "").replace("\n", " ")
        rows.append((f"--{flag.replace('_', '-')}", _type_name(info.annotation), f"{doc} (default: {_default(info)})"))
    if rows or not path:
        out.append((title, rows))
    for flag, info, shape in nested:
        doc = (info.description or "").split("\n")[0]
        opt = ""
        if shape.optional:
            opt = (
                " (optional, enabled by default)"
                if info.default is PydanticUndefined or info.default is not None
                else " (optional, default: None)"
            )
        if shape.list_of_models:
            _panels(shape.models[0], f"{flag}[*]", f"{flag}[*]: {doc}", out)
        elif shape.plugin_kind:
            for variant in shape.models:
                _panels(variant, flag, f"{flag} variant: {variant.__qualname__.replace('.Config', '')}{opt}", out)
        else:
            _panels(shape.models[0], flag, f"{flag}: {doc}{opt}", out)


def render_help(model: type[BaseModel], prog: str, plain: bool = False, wide: bool = True) -> None:
    plain = plain or bool(os.environ.get("PYDANTIC_CONFIG_PLAIN"))
    if os.environ.get("PYDANTIC_CONFIG_WIDE") in ("0", "false"):
        wide = False
    panels: list[tuple[str, list[tuple[str, str, str]]]] = []
    _panels(model, "", "options", panels)
    console = Console(no_color=plain, width=200 if wide else 100, soft_wrap=False)
    console.print(f"usage: {prog} [-h] [@ FILE] [OPTIONS]\n", markup=False)
    console.print((model.__doc__ or "").strip() + "\n", markup=False)
    for title, rows in panels:
        if plain:
            console.print(title, markup=False)
            for flag, tp, doc in rows:
                console.print(f"  {flag} {tp}  {doc}", markup=False)
            continue
        table = Table(box=None, show_header=False, pad_edge=False, expand=False)
        table.add_column(style="cyan", no_wrap=True)
        table.add_column(style="yellow")
        table.add_column()
        for flag, tp, doc in rows:
            table.add_row(flag, tp, doc)
        console.print(Panel(table, title=title, title_align="left", box=box.ROUNDED))
