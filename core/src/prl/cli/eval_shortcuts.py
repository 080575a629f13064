"""``prl eval <taskset> -n -r -m -c -s -o``: shortcuts for a single-source eval."""

from __future__ import annotations

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
        source["select"] = select
    return {"source": [source]}
