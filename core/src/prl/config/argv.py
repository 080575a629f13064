"""Parse ``[@ file ...] [--section @ file] [--dotted.path value ...]`` into dicts.

Flags are kebab-case dotted paths resolved against the root config class, so the parser
knows whether a flag is a boolean, a list (tokens up to the next flag, or one JSON array),
a dict (JSON), an optional section (a bare flag turns it on) or a group.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from prl.config.errors import ConfigError
from prl.config.introspect import Shape, fields_of

_NUMBER = re.compile(r"^-\d|^-\.\d")
_TRUE = {"true", "True", "1"}
_FALSE = {"false", "False", "0"}


@dataclass
class ParsedArgs:
    root_files: list[str] = field(default_factory=list)
    section_files: list[tuple[list[str], str]] = field(default_factory=list)
    overrides: dict[str, Any] = field(default_factory=dict)
    positionals: list[str] = field(default_factory=list)
    help: bool = False
    help_section: str | None = None
    """``--help orchestrator.train``: the section whose options to show."""


def _is_flag(token: str) -> bool:
    return token.startswith("-") and not _NUMBER.match(token) and token not in ("-",)


def _resolve(root: type[BaseModel], path: list[str]) -> Shape | None:
    """Shape of ``path`` under ``root``; None for an unknown key (validation reports it)."""
    models = [root]
    shape: Shape | None = None
    for _i, part in enumerate(path):
        if shape is not None and (shape.passthrough or shape.kind == "json"):
            # any key (at any depth) below a pass-through section: another program's argument
            shape = Shape("json")
            continue
        if part.isdigit() and shape is not None and shape.kind == "list":
            models = shape.models
            shape = Shape("model", False, models)
            continue
        fields = fields_of(models)
        if part not in fields:
            return None
        shape = fields[part]
        models = shape.models
    return shape


def _group_fields(shape: Shape) -> str:
    names = list(fields_of(shape.models))
    return ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")


def _insert(target: dict, path: list[str], value: Any, flag: str) -> None:
    node = target
    for part in path[:-1]:
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(f"`{flag}` sets a field inside '{part}', which was already given a value")
        node = nxt
    node[path[-1]] = value


def _json(raw: str, flag: str, want: type) -> Any:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"`{flag}`: invalid JSON ({exc.msg}) in {raw!r}") from None
    if not isinstance(value, want):
        raise ConfigError(f"`{flag}` expects a JSON {want.__name__}, got {raw!r}")
    return value


def _none(value: str) -> Any:
    return None if value == "None" else value


def _json_leaf(values: list[str]) -> Any:
    """A pass-through argument prl does not type: a bare flag is true, "None" is null, JSON
    text becomes its value (256 a number, {...} a dict), anything else stays a string."""
    if not values:
        return True
    if values[0] == "None":
        return None
    try:
        return json.loads(values[0])
    except ValueError:
        return values[0]


def parse_argv(argv: list[str], root: type[BaseModel], short: dict[str, str] | None = None) -> ParsedArgs:
    """Split argv into files, per-section files, a nested override dict and positionals."""
    short = short or {}
    out = ParsedArgs()
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok in ("-h", "--help"):
            out.help = True
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is not None and not _is_flag(nxt) and not nxt.startswith("@"):
                out.help_section = nxt
                i += 1
            i += 1
            continue
        if tok == "@":
            if i + 1 >= len(argv):
                raise ConfigError("`@` must be followed by a config file path")
            out.root_files.append(argv[i + 1])
            i += 2
            continue
        if tok.startswith("@"):
            out.root_files.append(tok[1:])
            i += 1
            continue
        if not _is_flag(tok):
            out.positionals.append(tok)
            i += 1
            continue
        i = _parse_flag(argv, i, root, short, out)
    if out.help and out.help_section is None and out.positionals:
        # `prl rl orchestrator --help` asks for a section too (a taskset id of `prl eval`
        # stays a positional: it names no section)
        if names_section(root, out.positionals[0]):
            out.help_section = out.positionals.pop(0)
    return out


def names_section(root: type[BaseModel], token: str) -> bool:
    """Whether ``token`` (after or before ``--help``) asks for a section's help."""
    return token == "all" or token.replace("-", "_").split(".")[0] in root.model_fields


def _parse_flag(argv: list[str], i: int, root: type[BaseModel], short: dict[str, str], out: ParsedArgs) -> int:
    tok = argv[i]
    inline: str | None = None
    if "=" in tok:
        tok, inline = tok.split("=", 1)
    if tok.startswith("--"):
        name = tok[2:]
    elif tok[1:] in short:
        name = short[tok[1:]]
    else:
        raise ConfigError(f"Unrecognized arguments: {tok}")
    negate = False
    path = name.replace("-", "_").split(".")
    shape = _resolve(root, path)
    if shape is None:
        # --no-a.b.c and --a.b.no-c both negate a.b.c
        for alt in (
            [path[0][3:]] + path[1:] if path[0].startswith("no_") else None,
            path[:-1] + [path[-1][3:]] if path[-1].startswith("no_") else None,
        ):
            alt_shape = _resolve(root, alt) if alt else None
            if alt_shape is not None and (alt_shape.kind in ("bool", "json") or alt_shape.optional):
                path, shape, negate = alt, alt_shape, True
                break
    flag = "--" + ".".join(p.replace("_", "-") for p in path)
    if negate:
        if inline is not None:
            raise ConfigError(f"`--no-{flag[2:]}` takes no value")
        _insert(out.overrides, path, False if shape.kind in ("bool", "json") else None, flag)
        return i + 1
    values, nxt = _take_values(argv, i + 1, inline, shape)
    if (
        values
        and values[0] == "@"
        or (len(values) == 1 and values[0].startswith("@") and shape and shape.kind == "model")
    ):
        file = values[1] if values[0] == "@" and len(values) > 1 else values[0][1:]
        if not file:
            raise ConfigError(f"`{flag} @` must be followed by a config file path")
        out.section_files = [(p, f) for p, f in out.section_files if p != path] + [(path, file)]
        return nxt
    _insert(out.overrides, path, _convert(values, shape, flag), flag)
    return nxt


def _take_values(argv: list[str], j: int, inline: str | None, shape: Shape | None) -> tuple[list[str], int]:
    if inline is not None:
        return [inline], j
    values: list[str] = []
    many = shape is not None and shape.kind == "list"
    while j < len(argv) and not _is_flag(argv[j]):
        values.append(argv[j])
        j += 1
        if values[0] == "@" and len(values) < 2:
            continue
        if not many:
            break
    return values, j


def _convert(values: list[str], shape: Shape | None, flag: str) -> Any:
    if shape is None:
        if not values:
            return True  # unknown key: validation rejects it with a "did you mean"
        return _none(values[0]) if len(values) == 1 else values
    if shape.kind == "json":
        return _json_leaf(values)
    if shape.kind == "bool":
        if not values:
            return True
        if values[0] in _TRUE | _FALSE:
            return values[0] in _TRUE
        if values[0] == "None" and shape.optional:
            return None
        raise ConfigError(f"`{flag}` expects true/false/1/0, got {values[0]!r}")
    if shape.kind == "model":
        if not values:
            if shape.optional:
                return {}
            raise ConfigError(f"`{flag}` is a config group, not a leaf field. Try one of: {_group_fields(shape)}")
        if values[0] == "None" and shape.optional:
            return None
        if shape.optional and values[0] in _TRUE | _FALSE:
            # an optional section switched on with its defaults, or off (``--model.vlm true``)
            return {} if values[0] in _TRUE else None
        if values[0].startswith("{"):
            return _json(values[0], flag, dict)
        raise ConfigError(f"`{flag}` is a config group, not a leaf field. Try one of: {_group_fields(shape)}")
    if not values:
        raise ConfigError(f"`{flag} requires a value`")
    if shape.kind == "list":
        if len(values) == 1 and values[0].startswith("["):
            return _json(values[0], flag, list)
        if values == ["None"] and shape.optional:
            return None
        return values
    if shape.kind == "dict":
        if values[0] == "None" and shape.optional:
            return None
        return _json(values[0], flag, dict)
    return _none(values[0])
