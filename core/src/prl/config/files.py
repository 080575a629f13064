"""Config files (TOML, YAML, JSON) and the deep merge used for every source of values."""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path
from typing import Any

from prl.config.errors import ConfigError

SUFFIXES = (".toml", ".json", ".yaml", ".yml")


def load_file(path: str | Path) -> dict[str, Any]:
    """Parse one config file; a syntax error names file:line."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"Config file not found: {path}")
    if p.suffix not in SUFFIXES:
        raise ConfigError(f"{path}: unsupported config file type '{p.suffix}' (use {', '.join(SUFFIXES)})")
    text = p.read_text()
    try:
        if p.suffix == ".toml":
            data = tomllib.loads(text)
        elif p.suffix == ".json":
            data = json.loads(text)
        else:
            data = _load_yaml(text, p)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None) or _line_from_msg(str(exc))
        raise ConfigError(f"{path}:{line}: invalid TOML: {_strip_pos(str(exc))}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1: the top level must be a table/mapping, got {type(data).__name__}")
    return data


def _load_yaml(text: str, path: Path) -> Any:
    try:
        import yaml
    except ImportError:  # pragma: no cover - pyyaml is a dependency of prl-core
        raise ConfigError(f"{path}: YAML configs need pyyaml (pip install pyyaml)") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}:{line}: invalid YAML: {problem}") from None


def _line_from_msg(msg: str) -> int:
    import re

    m = re.search(r"line (\d+)", msg)
    return int(m.group(1)) if m else 1


def _strip_pos(msg: str) -> str:
    import re

    return re.sub(r"\s*\(at line \d+, column \d+\)", "", msg)


def deep_merge(base: Any, override: Any) -> Any:
    """Merge ``override`` into ``base``: dicts recursively, lists replaced whole.

    A dict whose keys are all digits merged onto a list updates those items (so the
    per-item CLI paths ``--x.source.0.ratio 2`` work on lists from files).
    """
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = deep_merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(override, dict) and override and all(k.isdigit() for k in override):
        out_list = list(base)
        for key, value in override.items():
            idx = int(key)
            if idx >= len(out_list):
                raise ConfigError(f"list index {idx} is out of range (the list has {len(out_list)} items)")
            out_list[idx] = deep_merge(out_list[idx], value)
        return out_list
    return copy.deepcopy(override)


def normalize_keys(data: Any) -> Any:
    """kebab-case keys to snake_case, so files and flags may use either spelling."""
    if isinstance(data, dict):
        return {str(k).replace("-", "_"): normalize_keys(v) for k, v in data.items()}
    if isinstance(data, list):
        return [normalize_keys(v) for v in data]
    return data


def none_strings(data: Any) -> Any:
    """The string "None" in a file means null."""
    if isinstance(data, dict):
        return {k: none_strings(v) for k, v in data.items()}
    if isinstance(data, list):
        return [none_strings(v) for v in data]
    return None if data == "None" else data
