"""From argv to a validated root config: files, section files, flags, validation."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from prl.config.argv import ParsedArgs, parse_argv
from prl.config.errors import ConfigError
from prl.config.files import deep_merge, load_file, none_strings, normalize_keys
from prl.config.introspect import fields_of

M = TypeVar("M", bound=BaseModel)


@dataclass
class Resolved:
    config: Any
    parsed: ParsedArgs
    merged: dict[str, Any]


def merge_sources(
    parsed: ParsedArgs,
    extra: dict[str, Any] | None = None,
    release: Callable[[dict, dict], dict] | None = None,
) -> dict[str, Any]:
    """Defaults < root files (left to right) < section files < CLI flags.

    ``release(lower, upper)``, where the root config has one (``layer_release``), prepares
    each layer before the next is merged on top (RL: copies of shared values that the next
    layer changes are dropped).
    """

    def over(lower: dict[str, Any], upper: dict[str, Any]) -> dict[str, Any]:
        return deep_merge(release(lower, upper) if release else lower, upper)

    data: dict[str, Any] = {}
    for path in parsed.root_files:
        data = over(data, none_strings(normalize_keys(load_file(path))))
    for section, path in parsed.section_files:
        loaded = none_strings(normalize_keys(load_file(path)))
        node = data
        for part in section[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--{'.'.join(section)}: cannot load a file into a non-table value")
        current = node.get(section[-1])
        node[section[-1]] = deep_merge(current, loaded) if isinstance(current, dict) else loaded
    if extra:
        data = over(data, extra)
    return over(data, parsed.overrides)


def resolve(
    root: type[M],
    argv: list[str],
    short: dict[str, str] | None = None,
    positionals: Callable[[list[str], dict], dict] | None = None,
) -> Resolved:
    parsed = parse_argv(argv, root, short)
    extra: dict[str, Any] = {}
    if parsed.positionals:
        if positionals is None:
            raise ConfigError(f"Unrecognized arguments: {' '.join(parsed.positionals)}")
        extra = positionals(parsed.positionals, parsed.overrides)
    merged = merge_sources(parsed, extra, getattr(root, "layer_release", None))
    if parsed.help:
        return Resolved(None, parsed, merged)
    return Resolved(validate(root, merged), parsed, merged)


def validate(root: type[M], data: dict[str, Any]) -> M:
    try:
        return root.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(root, exc, data)) from None


def format_validation_error(root: type[BaseModel], exc: ValidationError, data: dict) -> str:
    errors = exc.errors()
    lines = [
        f"Failed to validate config: {len(errors)} validation error{'s' if len(errors) != 1 else ''}"
        f" for {root.__name__}"
    ]
    for err in errors:
        path, models = _clean_loc(root, err["loc"], data)
        flag = _flag(path) or "<root>"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "Unknown field"
            near = difflib.get_close_matches(str(path[-1]), _names(models), n=1, cutoff=0.6)
            if near:
                msg += f" — did you mean {_flag(path[:-1] + [near[0]])}?"
        elif err["type"] == "missing":
            msg = "Field required"
        inp = err.get("input")
        got = "" if isinstance(inp, (dict, list)) or err["type"] == "missing" else f" (got {str(inp)!r})"
        lines.append(f"{flag}: {msg}{got}")
    return "\n".join(lines)


def _names(models: list[type[BaseModel]]) -> list[str]:
    return list(fields_of(models)) if models else []


def _clean_loc(root: type[BaseModel], loc: tuple, data: Any) -> tuple[list[Any], list[type[BaseModel]]]:
    """Drop union-tag and validator segments from a pydantic location by walking the input;
    return the path and the model(s) holding its last key."""
    path: list[Any] = []
    node = data
    models: list[type[BaseModel]] = [root]
    parent_models = models
    for seg in loc:
        if isinstance(node, dict) and seg in node:
            parent_models = models
            shape = fields_of(models).get(seg) if models else None
            models = shape.models if shape else []
            path.append(seg)
            node = node[seg]
        elif isinstance(node, list) and isinstance(seg, int) and seg < len(node):
            path.append(seg)
            node = node[seg]
        elif isinstance(node, dict) or isinstance(seg, str) and not isinstance(node, list):
            # a tag of a discriminated union or a field the input lacks (missing/extra)
            if models and seg in fields_of(models):
                # a field the input lacks: descend into its model(s) so that deeper
                # segments (a union tag, then the failing field) resolve against it
                parent_models, models = models, fields_of(models)[seg].models
                path.append(seg)
                node = None
            continue
    return path, parent_models


def _flag(path: list[Any]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "--") + str(part).replace("_", "-")
    return out
