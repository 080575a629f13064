"""From argv to a validated root config: files, section files, flags, validation."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from prl.config.argv import ParsedArgs, names_section, parse_argv
from prl.config.errors import ConfigError
from prl.config.files import deep_merge, load_file, none_strings, normalize_keys
from prl.config.hints import Origins, check_command_fits, check_file_arguments, nearest_options
from prl.config.introspect import fields_of

M = TypeVar("M", bound=BaseModel)


@dataclass
class Resolved:
    config: BaseModel
    parsed: ParsedArgs
    merged: dict[str, Any]


def merge_sources(parsed: ParsedArgs, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Defaults < root files (left to right) < section files < CLI flags."""
    data: dict[str, Any] = {}
    for path in parsed.root_files:
        data = deep_merge(data, none_strings(normalize_keys(load_file(path))))
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
        data = deep_merge(data, extra)
    return deep_merge(data, parsed.overrides)


def resolve(
    root: type[M],
    argv: list[str],
    short: dict[str, str] | None = None,
    positionals: Callable[[list[str], dict], dict] | None = None,
    prog: str | None = None,
) -> Resolved:
    prog = prog or f"prl {root.__name__}"
    parsed = parse_argv(argv, root, short)
    section = parsed.help_section
    if section and positionals is not None and not names_section(root, section):
        # `prl eval --help reverse-text`: a taskset id, not a section
        parsed.positionals.insert(0, section)
        parsed.help_section = None
    check_file_arguments(root, prog, argv, parsed.positionals)
    extra: dict[str, Any] = {}
    if parsed.positionals:
        if positionals is None:
            raise ConfigError(f"Unrecognized arguments: {' '.join(parsed.positionals)}")
        extra = positionals(parsed.positionals, parsed.overrides)
    check_command_fits(root, prog, parsed.root_files)
    merged = merge_sources(parsed, extra)
    if parsed.help:
        return Resolved(None, parsed, merged)
    files = [([], f) for f in parsed.root_files] + [(s, f) for s, f in parsed.section_files]
    return Resolved(validate(root, merged, Origins(files, parsed.overrides)), parsed, merged)


def validate(root: type[M], data: dict[str, Any], origins: Origins | None = None) -> M:
    """``origins``: the files and flags ``data`` came from, to say where in a file a bad
    value was written."""
    try:
        return root.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(root, exc, data, origins)) from None


def format_validation_error(
    root: type[BaseModel], exc: ValidationError, data: dict, origins: Origins | None = None
) -> str:
    lines = []
    for err in _user_errors(root, exc.errors(), data):
        path, models, found = _clean_loc(root, err["loc"], data)
        if err["type"] == "extra_forbidden" and not found and path[-1:] != [err["loc"][-1]]:
            path.append(err["loc"][-1])  # a key the input lacks (propagation put it there)
        flag = _flag(path) or "<root>"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "Unknown field" + _did_you_mean(root, path, models)
        elif err["type"] == "missing":
            msg = "Field required"
        inp = err.get("input")
        got = "" if isinstance(inp, (dict, list)) or err["type"] == "missing" else f" (got {str(inp)!r})"
        where = origins.where(path, err["type"], inp) if origins else None
        lines.append(f"{where + ': ' if where else ''}{flag}: {msg}{got}")
    n = len(lines)
    summary = f"Failed to validate config: {n} validation error{'s' if n != 1 else ''} for {root.__name__}"
    return "\n".join([summary, *lines])


def _user_errors(root: type[BaseModel], errors: list[dict], data: dict) -> list[dict]:
    """Drop the copies of a bad value that propagation made (a typo in a shared
    ``[monitors.wandb]``, a bad shared ``seq_len``, is also copied into trainer and
    orchestrator): the copy is not where the user wrote it, and the same key with the same
    value and error is reported where they did."""

    def same(err: dict) -> tuple[str, str, str]:
        return err["type"], str(err["loc"][-1]) if err["loc"] else "", repr(err.get("input"))

    written = [e for e in errors if e["type"] == "missing" or _clean_loc(root, e["loc"], data)[2]]
    reported = {same(e) for e in written}
    return [e for e in errors if e in written or same(e) not in reported]


def _did_you_mean(root: type[BaseModel], path: list[Any], models: list[type[BaseModel]]) -> str:
    """The sibling closest to the unknown key, else options elsewhere that end in it."""
    near = difflib.get_close_matches(str(path[-1]), _names(models), n=1, cutoff=0.6)
    if near:
        return f" — did you mean {_flag(path[:-1] + [near[0]])}?"
    elsewhere = [_flag(p.split(".")) for p in nearest_options(root, path)]
    return f" — did you mean {' or '.join(elsewhere)}?" if elsewhere else ""


def _names(models: list[type[BaseModel]]) -> list[str]:
    return list(fields_of(models)) if models else []


def _clean_loc(root: type[BaseModel], loc: tuple, data: Any) -> tuple[list[Any], list[type[BaseModel]], bool]:
    """Drop union-tag and validator segments from a pydantic location by walking the input;
    return the path, the model(s) holding its last key and whether the input has that key."""
    path: list[Any] = []
    node = data
    models: list[type[BaseModel]] = [root]
    parent_models = models
    found = False
    for seg in loc:
        found = False
        if isinstance(node, dict) and seg in node:
            found = True
            parent_models = models
            shape = fields_of(models).get(seg) if models else None
            models = shape.models if shape else []
            path.append(seg)
            node = node[seg]
        elif isinstance(node, list) and isinstance(seg, int) and seg < len(node):
            found = True
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
    return path, parent_models, found


def _flag(path: list[Any]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "--") + str(part).replace("_", "-")
    return out
