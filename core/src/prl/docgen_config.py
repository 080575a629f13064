"""Generate docs/reference/config.md from the config models and the installed plugins.

Every config model reachable from a command's root config gets one section: a table of its
fields with type, default and the attribute docstring written under each field. A field
typed as a plugin union links to one section per plugin kind that lists the variants the
in-repo plugin distributions (``prl-*``) register, each with its own field table. Each
user-facing root (rl, sft, eval) also lists every section it contains by flag path.

Run ``python -m prl.docgen --config docs/reference/config.md``; ``tests/test_docs.py``
fails when the file differs from what this module renders.
"""

from __future__ import annotations

import json
import os
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from prl.config.base import ComposedSection, PluginConfigBase
from prl.config.introspect import Shape, shape_of
from prl.config.monitors import MonitorsSection
from prl.config.sections import default_output_dir

IN_REPO_PREFIX = "prl-"
"""Only plugins from distributions named ``prl-*`` (this repository) are documented, so the
page does not depend on what else happens to be installed."""


def _roots() -> list[tuple[str, type[BaseModel]]]:
    from prl.config.components import InferenceConfig, OrchestratorConfig, SourceConfig, TrainerConfig
    from prl.config.roots import EvalConfig, RLConfig, SFTConfig

    return [
        ("prl rl", RLConfig),
        ("prl sft", SFTConfig),
        ("prl eval", EvalConfig),
        ("prl orchestrator", OrchestratorConfig),
        ("prl trainer", TrainerConfig),
        ("prl inference", InferenceConfig),
        ("prl env-server", SourceConfig),
    ]


USER_ROOTS = 3  # rl, sft, eval: the roots whose section paths are listed


# ---- Markdown helpers ------------------------------------------------------------------
_CODE = re.compile(r"(`+)(.+?)\1", re.S)
_ROLE = re.compile(r":[a-z]+:`([^`]+)`")  # Sphinx roles in docstrings: :func:`name`
_SPECIAL = {"\\": "\\\\", "*": "\\*", "_": "\\_", "[": "\\[", "]": "\\]", "|": "\\|", "<": "&lt;", ">": "&gt;"}


def md_text(text: str) -> str:
    """``text`` for a table cell: one line, Markdown specials escaped outside code spans."""
    text = _ROLE.sub(lambda m: f"``{m.group(1).lstrip('~')}``", " ".join(text.split()))
    out, pos = [], 0
    for m in _CODE.finditer(text):
        out.append(_escape(text[pos : m.start()]))
        code = m.group(2).strip()
        out.append(f"`{code}`" if "|" not in code and "`" not in code else _escape(code))
        pos = m.end()
    out.append(_escape(text[pos:]))
    return "".join(out)


def _escape(text: str) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch == "_" and 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum():
            out.append(ch)  # inside a word (output_dir) an underscore never starts emphasis
        else:
            out.append(_SPECIAL.get(ch, ch))
    return "".join(out)


def code(text: str) -> str:
    """``text`` as a code span, or escaped plain text when a code span cannot hold it."""
    return f"`{text}`" if "|" not in text and "`" not in text and text.strip() == text and text else _escape(text)


def anchor(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# ---- what to document ------------------------------------------------------------------
@dataclass
class Union:
    """A plugin kind whose config union appears in some field."""

    kind: str
    paths: list[str] = field(default_factory=list)


@dataclass
class Catalog:
    """Every model to document (in order of first appearance) and every plugin union."""

    models: dict[str, type[BaseModel]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    unions: dict[str, Union] = field(default_factory=dict)
    paths: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def key(self, model: type[BaseModel]) -> str:
        return f"{model.__module__}.{model.__qualname__}"

    def add(self, model: type[BaseModel]) -> bool:
        key = self.key(model)
        if key in self.models:
            return False
        self.models[key] = model
        name = model.__qualname__
        if name in self.names.values():  # two classes with one name: qualify the later one
            name = f"{model.__module__}.{name}"
        self.names[key] = name
        return True

    def name(self, model: type[BaseModel]) -> str:
        return self.names[self.key(model)]

    def link(self, model: type[BaseModel]) -> str:
        name = self.name(model)
        return f"[{_escape(name)}](#{anchor(name)})"


def _variants(kind: str) -> dict[str, type]:
    """Installed in-repo plugin classes of ``kind``, keyed by tag."""
    from prl.plugins import get_registry

    registry = get_registry()
    return {
        tag: cls
        for tag, cls in sorted(registry.classes(kind).items())
        if registry.origin(kind, tag).startswith(IN_REPO_PREFIX)
    }


def _monitor_section(meta: list) -> MonitorsSection | None:
    return next((m for m in meta if isinstance(m, MonitorsSection)), None)


def _field_meta(info: FieldInfo) -> list:
    meta = list(info.metadata)

    def walk(tp: Any) -> None:
        if typing.get_origin(tp) is typing.Annotated:
            meta.extend(typing.get_args(tp)[1:])
            walk(typing.get_args(tp)[0])
        elif typing.get_origin(tp) in (typing.Union, types.UnionType):
            for arg in typing.get_args(tp):
                walk(arg)

    walk(info.annotation)
    return meta


def _monitors_model(section: MonitorsSection) -> type[BaseModel]:
    """The ``[monitors]`` model with the in-repo monitor plugins only."""
    from pydantic import Field, create_model

    from prl.config.base import PrlModel

    fields: dict[str, Any] = {}
    for key, cls in _variants("monitors").items():
        on = section.component and getattr(cls, "enabled_by_default", False)
        doc = _doc(cls).split("\n")[0]
        default = Field(default_factory=cls.Config, description=doc) if on else Field(None, description=doc)
        fields[key] = (cls.Config | None, default)
    name = "MonitorsConfig" if section.component else "SharedMonitorsConfig"
    model = create_model(name, __base__=PrlModel, __module__="prl.config.monitors", **fields)
    model.__doc__ = (
        "Metric sinks, one optional section per installed monitor plugin (on by default: "
        + (", ".join(k for k, c in _variants("monitors").items() if getattr(c, "enabled_by_default", False)) or "none")
        + ")."
        if section.component
        else "Metric sinks set once for trainer and orchestrator; a section here turns that monitor on in both."
    )
    return model


def _children(info: FieldInfo) -> tuple[Shape, list[type[BaseModel]]]:
    """The shape of a field and the models to document below it (never plugin variants)."""
    meta = _field_meta(info)
    section = _monitor_section(meta)
    shape = shape_of(info.annotation, info.metadata)
    if section is not None:
        return shape, [_monitors_model(section)]
    if shape.plugin_kind:
        return shape, []
    return shape, list(shape.models) if (shape.kind == "model" or shape.list_of_models) else []


def collect() -> Catalog:
    cat = Catalog()
    for _command, root in _roots():
        cat.add(root)
    for i, (command, root) in enumerate(_roots()):
        paths: list[tuple[str, str]] = []
        _walk(cat, root, "", paths, record=i < USER_ROOTS)
        cat.paths[command] = paths
    # plugin variants may nest models of their own
    for kind in list(cat.unions):
        for cls in _variants(kind).values():
            _walk(cat, cls.Config, "", [], record=False)
    return cat


def _walk(cat: Catalog, model: type[BaseModel], path: str, paths: list, record: bool, seen=()) -> None:
    for name, info in model.model_fields.items():
        flag = f"{path}.{name}" if path else name
        shape, children = _children(info)
        if shape.plugin_kind:
            union = cat.unions.setdefault(shape.plugin_kind, Union(shape.plugin_kind))
            if record and flag not in union.paths:
                union.paths.append(flag)
            if record:
                paths.append((flag, f"[{_kind_label(shape.plugin_kind)} plugin](#{_union_anchor(shape.plugin_kind)})"))
            continue
        for child in children:
            cat.add(child)
            if child in seen:
                continue
            sub = f"{flag}[*]" if shape.list_of_models else flag
            if record:
                paths.append((sub, cat.link(child)))
            _walk(cat, child, sub, paths, record, (*seen, model))


def _default_tag(kind: str) -> str | None:
    """The tag a plugin union falls back to when the config names none."""
    from prl.plugins import KINDS, get_registry

    registry = get_registry()
    if hasattr(registry, "default_tag"):
        return registry.default_tag(kind)
    return getattr(KINDS[kind], "default", None)


def _kind_label(kind: str) -> str:
    from prl.plugins import KINDS

    return KINDS[kind].label


def _union_anchor(kind: str) -> str:
    return anchor(f"plugin-{kind}")


def _variant_anchor(kind: str, tag: str) -> str:
    return anchor(f"{kind}-{tag}")


# ---- types and defaults ----------------------------------------------------------------
def _constraint(meta: Any) -> str:
    for attr, sym in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
        value = getattr(meta, attr, None)
        if value is not None and not isinstance(meta, FieldInfo):
            return f"{sym} {value:g}" if isinstance(value, float) else f"{sym} {value}"
    return ""


def type_text(tp: Any, cat: Catalog) -> str:
    """A readable type: ``int ≥ 1 or None``, one of ``"a"``, ``"b"``, a link to a model."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        marks = []
        for meta in args[1:]:
            inner = meta.metadata if isinstance(meta, FieldInfo) else [meta]
            marks += [c for c in (_constraint(m) for m in inner) if c]
        base = type_text(args[0], cat)
        return f"{base} {', '.join(marks)}" if marks else base
    if origin is typing.Literal:
        values = [code(json.dumps(a)) for a in args]
        return values[0] if len(values) == 1 else "one of " + ", ".join(values)
    if origin in (typing.Union, types.UnionType):
        parts = [type_text(a, cat) for a in args if a is not type(None)]
        text = " or ".join(parts)
        return f"{text} or None" if type(None) in args else text
    if tp is type(None):
        return "None"
    if isinstance(tp, type) and issubclass(tp, BaseModel) and cat.key(tp) in cat.models:
        return cat.link(tp)
    if origin in (list, tuple, set, dict):
        inner = ", ".join(type_text(a, cat) for a in args if a is not Ellipsis)
        return f"{origin.__name__}[{inner}]" if inner else origin.__name__
    if tp is Any:
        return "any"
    return _escape(getattr(tp, "__name__", str(tp)))


def field_type(info: FieldInfo, cat: Catalog) -> str:
    shape, children = _children(info)
    if shape.plugin_kind:
        text = f"[{_kind_label(shape.plugin_kind)} plugin](#{_union_anchor(shape.plugin_kind)})"
        return f"{text} or None" if shape.optional else text
    meta = _field_meta(info)
    if children and any(isinstance(m, ComposedSection) for m in meta):
        return f"{cat.link(children[0])} or None" if shape.optional else cat.link(children[0])
    marks = [c for c in (_constraint(m) for m in info.metadata) if c]
    text = type_text(info.annotation, cat)
    return f"{text} {', '.join(marks)}" if marks else text


def value_text(value: Any) -> str:
    if isinstance(value, BaseModel):
        tag = _tag_of(value)
        return f"{code(json.dumps(tag))} plugin" if tag else "see section"
    if value is None:
        return code("None")
    if isinstance(value, os.PathLike):
        value = str(value)
    if isinstance(value, (bool, int, float, str, list, tuple, dict)):
        try:
            return code(json.dumps(value, ensure_ascii=False))
        except TypeError:
            pass
    return code(repr(value))


def _tag_of(value: BaseModel) -> str | None:
    if not isinstance(value, PluginConfigBase):
        return None
    for attr in ("type", "name", "id"):
        tag = getattr(value, attr, None)
        if isinstance(tag, str) and attr in type(value).model_fields:
            return tag
    return None


def default_text(info: FieldInfo, shape: Shape) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    if info.default_factory is default_output_dir:
        return f"{code('$PRL_OUTPUT_DIR')} or {code('outputs')}"
    if info.default_factory is not None:
        try:
            value = info.default_factory()
        except Exception:  # a factory needing a plugin that is not installed
            return "plugin default"
    else:
        value = info.default
    if shape.kind == "model" and not shape.plugin_kind:
        if value is None:
            return "off"
        if isinstance(value, BaseModel) and shape.optional:
            return "on"
    if _is_monitors(value):
        on = [k for k in type(value).model_fields if getattr(value, k) is not None]
        return ("on: " + ", ".join(on)) if on else "all off"
    return value_text(value)


def _is_monitors(value: Any) -> bool:
    return isinstance(value, BaseModel) and type(value).__name__ in ("MonitorsConfig", "SharedMonitorsConfig")


# ---- rendering -------------------------------------------------------------------------
def _doc(obj: Any) -> str:
    import inspect

    return inspect.cleandoc(obj.__doc__ or "")


def fields_table(model: type[BaseModel], cat: Catalog) -> list[str]:
    rows = ["| field | type | default | description |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        shape = shape_of(info.annotation, info.metadata)
        cells = [code(name), field_type(info, cat), default_text(info, shape), md_text(info.description or "")]
        rows.append("| " + " | ".join(cells) + " |")
    return rows if len(rows) > 2 else ["No fields."]


def _model_section(model: type[BaseModel], cat: Catalog, commands: dict[str, str]) -> list[str]:
    name = cat.name(model)
    lines = [f"### {_escape(name)} {{#{anchor(name)}}}", ""]
    doc = _doc(model)
    if doc and not doc.startswith("Usage docs:"):  # pydantic's BaseModel docstring leaks into create_model
        lines += [md_text(doc.split("\n\n")[0]), ""]
    if name in commands:
        lines += [f"Root config of {code(commands[name])}.", ""]
    return lines + fields_table(model, cat) + [""]


def _root_paths(command: str, cat: Catalog) -> list[str]:
    lines = [f"### Sections of {code(command)} {{#{anchor('sections ' + command)}}}", ""]
    lines += ["| flag prefix | section |", "|---|---|"]
    for path, link in cat.paths[command]:
        lines.append(f"| {code('--' + path.replace('_', '-'))} | {link} |")
    return lines + [""]


def _union_section(union: Union, cat: Catalog) -> list[str]:
    from prl.plugins import KINDS

    spec = KINDS[union.kind]
    variants = _variants(union.kind)
    anchors: dict[str, str] = {}
    for tag in variants:
        base = candidate = _variant_anchor(union.kind, tag)
        n = 1
        while candidate in anchors.values():  # qwen3.5 and qwen3-5 would share one anchor
            n += 1
            candidate = f"{base}-{n}"
        anchors[tag] = candidate
    title = f"{spec.label.capitalize()} plugins"
    lines = [f"### {title} {{#{_union_anchor(union.kind)}}}", ""]
    where = ", ".join(code(p) for p in union.paths)
    lines.append(f"Selected by {code(spec.tag_attr)} in {where}." if where else f"Selected by {code(spec.tag_attr)}.")
    default = _default_tag(union.kind)
    if default:
        lines[-1] += f" Default: {code(json.dumps(default))}."
    lines += ["", f"| {spec.tag_attr} | distribution | summary |", "|---|---|---|"]
    from prl.plugins import get_registry

    for tag, cls in variants.items():
        summary = md_text(_doc(cls).split("\n")[0])
        dist = get_registry().origin(union.kind, tag)
        lines.append(f"| [{code(tag)}](#{anchors[tag]}) | {dist} | {summary} |")
    lines.append("")
    for tag, cls in variants.items():
        lines += [f"#### {spec.label} {code(tag)} {{#{anchors[tag]}}}", ""]
        doc = _doc(cls.Config) or _doc(cls)
        if doc:
            lines += [md_text(doc.split("\n\n")[0]), ""]
        lines += fields_table(cls.Config, cat) + [""]
    return lines


def render_config() -> str:
    cat = collect()
    roots = _roots()
    commands = {cat.name(root): command for command, root in roots}
    lines = [
        "# Configuration reference",
        "",
        "Generated from the config models and the in-repo plugins by",
        "`python -m prl.docgen --config docs/reference/config.md`; do not edit by hand.",
        "How to write these values in files and flags: [Configuration](../configuration.md).",
        "",
        "A field `batch_size` of the section at flag prefix `--orchestrator` is",
        "`--orchestrator.batch-size` on the command line and `batch_size` under",
        "`[orchestrator]` in a TOML file. Defaults are shown in JSON spelling; `None` is null,",
        'written `"None"` in files and flags. A section whose default is *off* is turned on by',
        "its bare header (`[ckpt]`) or flag (`--ckpt`).",
        "",
        "## Commands",
        "",
        "| command | root config |",
        "|---|---|",
    ]
    for command, root in roots:
        lines.append(f"| {code(command)} | {cat.link(root)} |")
    lines += ["", "## Section paths", ""]
    for command, _root in roots[:USER_ROOTS]:
        lines += _root_paths(command, cat)
    lines += ["## Config sections", ""]
    for model in cat.models.values():
        lines += _model_section(model, cat, commands)
    lines += ["## Plugin configs", ""]
    from prl.plugins import KINDS

    for kind in KINDS:
        if kind in cat.unions:
            lines += _union_section(cat.unions[kind], cat)
    return "\n".join(lines).rstrip("\n") + "\n"
