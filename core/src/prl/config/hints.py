"""Hints for the usual first mistakes on a config command's command line.

A config file given without ``@`` (``prl rl my.toml``, ``--config my.toml``), an unknown
flag that is the last part of a real one (``--lr`` for ``--trainer.optim.lr``), an RL file
given to ``prl sft`` (or the other way round), and where in a file a bad key was written.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from prl.config.errors import ConfigError
from prl.config.files import SUFFIXES, load_file, normalize_keys
from prl.config.introspect import fields_of

# Top-level sections that only one of the two run commands has: a file holding them is
# meant for that command.
_OWN_SECTIONS = {
    "RLConfig": ("prl rl", ("orchestrator", "trainer")),
    "SFTConfig": ("prl sft", ("data", "optim", "loss", "scheduler", "val")),
}


def check_file_arguments(root: type[BaseModel], prog: str, argv: list[str], positionals: list[str]) -> None:
    """``prl rl my.toml`` and ``prl rl --config my.toml``: config files take ``@``."""
    files = [p for p in positionals if p.endswith(SUFFIXES)]
    if "config" not in root.model_fields:
        for i, tok in enumerate(argv):
            if tok == "--config":
                nxt = argv[i + 1] if i + 1 < len(argv) else "-"
                files.append("FILE" if nxt.startswith("-") else nxt)
            elif tok.startswith("--config="):
                files.append(tok.split("=", 1)[1])
    if files:
        raise ConfigError(f"{prog}: config files are passed with @: {prog} @ {' @ '.join(files)}")


def check_command_fits(root: type[BaseModel], prog: str, files: list[str]) -> None:
    """A file with sections only the other run command has was given to the wrong one."""
    for other, (command, sections) in _OWN_SECTIONS.items():
        if other == root.__name__ or root.__name__ not in _OWN_SECTIONS:
            continue
        for path in files:
            data = normalize_keys(load_file(path))
            found = [s for s in sections if s in data and s not in root.model_fields]
            if found:
                raise ConfigError(
                    f"{prog}: {path} looks like a `{command}` config (it has [{found[0]}]); run {command} @ {path}"
                )


def _leaf_paths(root: type[BaseModel]) -> tuple[tuple[str, ...], ...]:
    """Every option's dotted path under ``root`` (lists of models and pass-through dicts
    are not entered: their items have no flag of their own)."""
    out: list[tuple[str, ...]] = []

    def walk(models: list[type[BaseModel]], prefix: tuple[str, ...]) -> None:
        if len(prefix) > 8:
            return
        for name, shape in fields_of(models).items():
            if shape.kind == "model" and not shape.passthrough:
                walk(shape.models, prefix + (name,))
            elif not shape.list_of_models:
                out.append(prefix + (name,))

    walk([root], ())
    return tuple(out)


def nearest_options(root: type[BaseModel], path: list[str], limit: int = 3) -> list[str]:
    """Options whose last part is, or is close to, the unknown key at ``path``; those under
    the same section first (``--trainer.lr`` -> ``trainer.optim.lr``)."""
    name = str(path[-1])
    leaves = _leaf_paths(root)
    hits = [p for p in leaves if p[-1] == name]
    if not hits:
        close = set(difflib.get_close_matches(name, {p[-1] for p in leaves}, n=3, cutoff=0.8))
        hits = [p for p in leaves if p[-1] in close]
    parent = tuple(str(p) for p in path[:-1])
    hits.sort(key=lambda p: (p[: len(parent)] != parent, len(p)))
    return [".".join(p) for p in hits[:limit]]


def key_line(text: str, path: list[Any]) -> int | None:
    """The 1-based line where ``path`` is written in a TOML, YAML or JSON file's text.

    The parsers keep no positions, so this scans: each key is looked for after the line
    of the key before it (a TOML ``[a.b]`` header holds both a and b); a list index i moves
    to the i-th repeat of the list's key (``[[a.source]]`` headers)."""
    lines = text.splitlines()
    line, prev = 0, None
    for seg in path:
        if isinstance(seg, int) or (isinstance(seg, str) and seg.isdigit()):
            for _ in range(int(seg)):
                nxt = _find(lines, prev, line + 1) if prev else None
                if nxt is None:
                    return line + 1 if prev else None
                line = nxt
            continue
        found = _find(lines, str(seg), line)
        if found is None:
            return line + 1 if prev else None
        line, prev = found, str(seg)
    return line + 1


def _find(lines: list[str], key: str, start: int) -> int | None:
    spellings = "|".join(re.escape(k) for k in {key, key.replace("_", "-")})
    pattern = re.compile(rf"(?:^|[\s\[.{{,])[\"']?(?:{spellings})[\"']?\s*(?:=|:|\.|\])")
    for i in range(start, len(lines)):
        if not lines[i].lstrip().startswith("#") and pattern.search(lines[i]):
            return i
    return None


@dataclass
class Origins:
    """Where the values came from: config files as (section, path) in merge order, and
    the nested dict of CLI flags (which override the files)."""

    files: list[tuple[list[str], str]] = field(default_factory=list)
    flags: dict[str, Any] = field(default_factory=dict)

    def where(self, path: list[Any], error_type: str, value: Any) -> str | None:
        """``file:line`` to put before an error at ``path``: the key for an unknown or bad
        value, the table lacking a required field. Model-level errors (a dict value) and
        values a flag set are not a file's."""
        if error_type == "missing":
            path = path[:-1]
        elif error_type != "extra_forbidden" and isinstance(value, (dict, list)):
            return None
        if not path or _has(self.flags, path):
            return None
        return where_in_files(self.files, path)


def _has(node: Any, path: list[Any]) -> bool:
    for seg in path:
        if not isinstance(node, dict) or str(seg) not in node:
            return False
        node = node[str(seg)]
    return True


def where_in_files(files: list[tuple[list[str], str]], path: list[Any]) -> str | None:
    """``file:line`` of the rightmost file that sets ``path``; ``files`` are (section
    prefix, file) in merge order. None when no file sets it."""
    for prefix, file in reversed(files):
        if [str(p) for p in path[: len(prefix)]] != prefix:
            continue
        rest = path[len(prefix) :]
        node: Any = normalize_keys(load_file(file))
        for seg in rest:
            if isinstance(node, dict) and str(seg) in node:
                node = node[str(seg)]
            elif isinstance(node, list) and isinstance(seg, int) and seg < len(node):
                node = node[seg]
            else:
                break
        else:
            line = key_line(Path(file).read_text(), rest)
            return f"{file}:{line}" if line else file
    return None
