"""``--help`` for config commands, one section at a time.

``prl rl --help`` prints the usage line, an "options" panel for the top-level scalars and
one line per section; ``prl rl --help <section>`` (a dotted path such as
``orchestrator.train``, or ``all``) prints that section's panels: ``path: <docstring>`` per
nested model, ``path variant: ClassName`` per installed union variant and ``path[*]`` for
lists of models. A model or plugin family met again under another path (the renderer
family sits under several) is listed once; later paths get one row pointing to it.
"""

from __future__ import annotations

import difflib
import os
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from prl.config.errors import ConfigError
from prl.config.help_render import HelpPanel, print_help
from prl.config.introspect import Shape, shape_of

ALL = "all"
# Families with more variants than this are listed by name inside a larger section.
MAX_VARIANTS = 8


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


def _flag(path: str) -> str:
    return "--" + path.replace("_", "-")


def _text(text: str | None) -> str:
    """A docstring as one line of help: whitespace collapsed, RST ``code`` as `code`."""
    return " ".join((text or "").split()).replace("``", "`")


def _first_line(text: str | None) -> str:
    """A docstring's first sentence (its first paragraph when that is short)."""
    para = _text((text or "").strip().split("\n\n")[0])
    cut = para.find(". ")
    return para[: cut + 1] if len(para) > 100 and cut > 0 else para


def _section_doc(info: Any, shape: Shape) -> str:
    """The field's docstring, else its model's (a monitor section documents only its
    class), plus whether the section is optional."""
    doc = _first_line(info.description)
    if not doc and len(shape.models) == 1 and not shape.plugin_kind:
        doc = _first_line(shape.models[0].__doc__)
    if shape.optional:
        on = info.default is PydanticUndefined or info.default is not None
        doc = f"{doc} (optional, {'enabled by default' if on else 'default: None'})".strip()
    return doc


def _variant_name(model: type[BaseModel]) -> str:
    return model.__qualname__.replace(".Config", "")


def _tags(shape: Shape) -> list[str]:
    """The tags a plugin union is chosen by (``type = "ppo"``), in registry order."""
    from prl.plugins import get_registry

    return list(get_registry().classes(shape.plugin_kind))


class _Collector:
    """Walks a model tree into panels, listing each model class and plugin family once.

    A plugin family with more than ``MAX_VARIANTS`` variants (the renderers) is one panel
    of variant names below the section asked for; ``--help <its path>`` shows their options.
    """

    def __init__(self, prog: str, selected: str | None) -> None:
        self.prog = prog
        self.selected = selected
        self.panels: list[HelpPanel] = []
        self.seen: dict[Any, str] = {}

    def model(self, model: type[BaseModel], path: str, head: str, doc: str) -> None:
        panel = HelpPanel(head, doc)
        self.panels.append(panel)
        nested = []
        for name, info in model.model_fields.items():
            sub = f"{path}.{name}" if path else name
            shape = shape_of(info.annotation, info.metadata)
            if shape.kind == "model" or shape.list_of_models:
                nested.append((sub, info, shape))
                continue
            desc = _text(info.description)
            panel.rows.append((_flag(sub), _type_name(info.annotation), f"{desc} (default: {_default(info)})".lstrip()))
        for sub, info, shape in nested:
            self.section(sub, info, shape, panel)

    def section(self, path: str, info: Any, shape: Shape, parent: HelpPanel | None) -> None:
        """Panels for the nested field at ``path``, or a row in ``parent`` pointing to where
        the same options were already listed."""
        doc = _section_doc(info, shape)
        key = ("plugin", shape.plugin_kind) if shape.plugin_kind else shape.models[0]
        if key in self.seen and parent is not None:
            # listed already: at this very path (a field several variants share) or elsewhere
            if self.seen[key] not in (path, f"{path}[*]"):
                kind = "list" if shape.list_of_models else "section"
                parent.rows.append((_flag(path), kind, f"{doc} Same options as {self.seen[key]}.".lstrip()))
            return
        if shape.list_of_models:
            self.seen[key] = f"{path}[*]"
            self.model(shape.models[0], f"{path}[*]", f"{path}[*]", doc)
        elif shape.plugin_kind and len(shape.models) > MAX_VARIANTS and self.selected not in (None, path):
            self.seen[key] = path
            self.panels.append(self.variants(path, doc, shape))
        elif shape.plugin_kind:
            self.seen[key] = path
            suffix = doc[doc.rfind(" (optional") :] if "(optional" in doc else ""
            for variant in shape.models:
                self.model(variant, path, f"{path} variant: {_variant_name(variant)}{suffix}", "")
        else:
            self.seen[key] = path
            self.model(shape.models[0], path, path, doc)

    def variants(self, path: str, doc: str, shape: Shape) -> HelpPanel:
        """One row per variant: the tag that picks it, its class and what it is."""
        from prl.plugins import KINDS

        pairs = zip(_tags(shape), shape.models, strict=True)
        rows = [(tag, _variant_name(m), _first_line(m.__doc__)) for tag, m in pairs]
        chosen = f"chosen by {_flag(path + '.' + KINDS[shape.plugin_kind].tag_attr)}"
        see = f"options of each: {self.prog} --help {path}"
        return HelpPanel(f"{path} variants", f"{doc} ({chosen}; {see})".lstrip(), rows)

    def result(self) -> list[HelpPanel]:
        return [p for p in self.panels if p.rows or p.head == "options"]


def _nested_fields(model: type[BaseModel]) -> list[tuple[str, Any, Shape]]:
    out = []
    for name, info in model.model_fields.items():
        shape = shape_of(info.annotation, info.metadata)
        if shape.kind == "model" or shape.list_of_models:
            out.append((name, info, shape))
    return out


def overview(model: type[BaseModel]) -> tuple[HelpPanel, HelpPanel]:
    """The top-level view: the "options" panel and one row per section."""
    options = HelpPanel("options")
    nested = {name for name, _, _ in _nested_fields(model)}
    for name, info in model.model_fields.items():
        if name not in nested:
            desc = _text(info.description)
            options.rows.append((_flag(name), _type_name(info.annotation), f"{desc} (default: {_default(info)})"))
    sections = HelpPanel("sections")
    for name, info, shape in _nested_fields(model):
        kind = "list" if shape.list_of_models else ""
        if shape.plugin_kind:
            tags = _tags(shape)
            shown = [t for i, t in enumerate(tags) if len(",".join(tags[: i + 1])) <= 18]
            kind = "{" + ",".join(shown) + (",..." if len(shown) < len(tags) else "") + "}"
        sections.rows.append((name, kind, _section_doc(info, shape)))
    return options, sections


def section_panels(model: type[BaseModel], section: str, prog: str) -> list[HelpPanel]:
    """Panels of one section (a dotted path; ``all`` for every section)."""
    collector = _Collector(prog, None if section == ALL else section)
    if section == ALL:
        collector.model(model, "", "options", "")
        return collector.result()
    parts = section.replace("-", "_").replace("[*]", "").split(".")
    models, shape, info, walked = [model], None, None, []
    for part in parts:
        found = [m.model_fields[part] for m in models if part in m.model_fields]
        if not found:
            raise ConfigError(_unknown_section(prog, section, walked, models))
        info = found[0]
        shape = shape_of(info.annotation, info.metadata)
        walked.append(part)
        if not (shape.kind == "model" or shape.list_of_models):
            # an option, not a section: show the section that holds it
            parent = ".".join(walked[:-1])
            return section_panels(model, parent, prog) if parent else [overview(model)[0]]
        models = shape.models
    collector.selected = ".".join(walked)
    collector.section(collector.selected, info, shape, None)
    return collector.result()


def _unknown_section(prog: str, section: str, walked: list[str], models: list[type[BaseModel]]) -> str:
    names = []
    for m in models:
        names += [n for n, _, _ in _nested_fields(m) if n not in names]
    prefix = ".".join(walked) + "." if walked else ""
    wrong = section.replace("-", "_").split(".")[len(walked)]
    near = difflib.get_close_matches(wrong, names, n=1, cutoff=0.6)
    hint = f"; did you mean {prefix}{near[0]}?" if near else ""
    listed = ", ".join(prefix + n for n in names) or "none"
    return f"{prog} --help: no section '{section}'{hint} (sections here: {listed})"


def render_help(
    model: type[BaseModel], prog: str, plain: bool = False, wide: bool = True, section: str | None = None
) -> None:
    """Print the overview, or one section's panels, at the terminal's width."""
    plain = plain or os.environ.get("PYDANTIC_CONFIG_PLAIN", "") not in ("", "0", "false")
    if os.environ.get("PYDANTIC_CONFIG_WIDE") in ("0", "false"):
        wide = False
    if section:
        panels = section_panels(model, section, prog)
        footer = ""
    else:
        panels = list(overview(model))
        names = [row[0] for row in panels[1].rows]
        example = next((n for n in ("orchestrator", "data", "source", "model") if n in names), ALL)
        footer = (
            f"One section's options: {prog} --help <section> (e.g. {prog} --help {example}); "
            f"every section: {prog} --help {ALL}"
        )
    doc = (model.__doc__ or "").strip()
    print_help(f"usage: {prog} [-h] [@ FILE] [OPTIONS]", doc, panels, footer, plain=plain, wide=wide)
