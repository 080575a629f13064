"""``prl eval <taskset> -n -r -m -c -s -o``: shortcuts for a single-source eval."""

from __future__ import annotations

import json
from typing import Any

from prl.config.errors import ConfigError

SHORT = {"n": "num_examples", "r": "group_size", "m": "model.name", "o": "output_dir"}


def expand_argv(argv: list[str]) -> list[str]:
    """-c N pins the concurrency band; -s shuffles the examples of the single source."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "-c" or tok.startswith("-c="):
            value = tok[3:] if "=" in tok else (argv[i + 1] if i + 1 < len(argv) else None)
            if value is None:
                raise ConfigError("-c requires a value: the number of rollouts in flight, e.g. -c 8")
            out += ["--concurrency.min-inflight", value, "--concurrency.max-inflight", value]
            i += 1 if "=" in tok else 2
            continue
        out.append("--select.shuffle" if tok == "-s" else tok)
        i += 1
    return out


def positional_source(positionals: list[str], overrides: dict[str, Any]) -> dict[str, Any]:
    """Build the one ``[[source]]`` from ``<taskset>`` plus ``--env.*`` and ``-s`` flags."""
    if len(positionals) != 1:
        raise ConfigError(f"Unrecognized arguments: {' '.join(positionals[1:])}")
    taskset = positionals[0]
    env = overrides.pop("env", {}) or {}
    env.setdefault("taskset", {})["id"] = taskset
    source: dict[str, Any] = {"name": taskset, "env": env}
    select = overrides.pop("select", None)
    if select:
        source["select"] = {k: _id_list(v) if k in ("include", "exclude") else v for k, v in select.items()}
    return {"source": [source]}


def _id_list(value: Any) -> Any:
    """``--select.include`` after a taskset id: the flag parser does not know the source's
    list fields there, so a JSON array or comma-separated ids arrive as one string."""
    if not isinstance(value, str):
        return value
    if value.lstrip().startswith("["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise ConfigError(f"--select: {value!r} is not a JSON array of task ids") from None
    return [v for v in value.split(",") if v]
