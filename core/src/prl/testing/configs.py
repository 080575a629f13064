"""The tiny RL run that end-to-end tests start from, and a TOML writer for it.

Every slow test of ``prl rl`` needs the same small run: a tiny model, two reverse-text
steps, a batch of 4 in groups of 2, 8 completion tokens, one thread per process and free
ports. :func:`tiny_rl_config` returns that run as a dict with each test's overrides merged
in, the way a second config file would be (:func:`prl.config.files.deep_merge`: tables
merge key by key, lists are replaced whole, a table of digit keys updates list items), and
with one addition: ``None`` removes a key, since TOML has no null of its own. A test then
reads as the few settings it is about::

    from prl.testing.configs import tiny_rl_toml

    toml = tiny_rl_toml(tmp_path, model, {"orchestrator": {"batch_size": 8}, "ckpt": {}})
    assert cmd_rl(["@", str(toml), "--run.name", "e2e"]) == 0
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prl.config.files import deep_merge

REVERSE_TEXT = {"name": "reverse-text", "env": {"taskset": {"id": "reverse-text"}}}
"""The one training source of the tiny run (builtin reverse-text, served in-process)."""

VLLM_CPU_FLAGS = [
    *("--inference.backend.type", "vllm", "--inference.backend.dtype", "float32"),
    *("--inference.backend.enforce-eager", "--inference.backend.gpu-memory-utilization", "0.3"),
    *("--inference.env-vars", '{"VLLM_CPU_KVCACHE_SPACE": "1"}'),
]
"""``prl rl`` flags that serve the tiny model with vllm-cpu: float32, eager, and a 1 GiB KV
cache per engine, so a run's engines fit beside its trainer on a small machine."""


def tiny_rl_config(model: str | Path, output_dir: str | Path, *overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The tiny reverse-text RL run on ``model`` writing under ``output_dir``, with each of
    ``overrides`` merged in turn (see :func:`merge`)."""
    base: dict[str, Any] = {
        "max_steps": 2,
        "seq_len": 256,
        "output_dir": str(output_dir),
        # Two CPU cores run inference, trainer and orchestrator at once: no thread pools.
        "env_vars": {"OMP_NUM_THREADS": "1"},
        "model": {"name": str(model)},
        "orchestrator": {
            "batch_size": 4,
            "train": {"group_size": 2, "sampling": {"max_completion_tokens": 8}, "source": [REVERSE_TEXT]},
        },
        "trainer": {"optim": {"lr": 1e-3}},
        # Port 0: prl rl picks a free port at launch and tells the orchestrator.
        "inference": {"server": {"port": 0}},
    }
    return merge(base, *overrides)


def distill_overrides(algo: Mapping[str, Any], steps: int) -> dict[str, Any]:
    """The distillation tests' change to the tiny run (opd, opsd, sft against a frozen
    model): ``steps`` steps of ``algo``, batches of 8 with 16 completion tokens, lr 3e-3."""
    train = {"sampling": {"max_completion_tokens": 16}, "algo": dict(algo)}
    return {"max_steps": steps, "orchestrator": {"batch_size": 8, "train": train}, "trainer": {"optim": {"lr": 3e-3}}}


def tiny_rl_toml(directory: Path, model: str | Path, *overrides: Mapping[str, Any], name: str = "rl.toml") -> Path:
    """Write the tiny run to ``directory/name`` with outputs under ``directory/outputs``
    (an override of ``output_dir`` wins); return the file's path."""
    return write_toml(Path(directory) / name, tiny_rl_config(model, Path(directory) / "outputs", *overrides))


def merge(base: Mapping[str, Any], *overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with each override merged in turn as a config file would be; a ``None``
    value removes that key. Neither argument is changed."""
    out: Any = copy.deepcopy(dict(base))
    for override in overrides:
        out = _merge_one(out, override)
    return out


def _merge_one(base: Any, override: Any) -> Any:
    if not (isinstance(base, dict) and isinstance(override, Mapping)):
        return deep_merge(base, override)
    out = dict(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif key in out:
            out[key] = _merge_one(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def write_toml(path: Path, config: Mapping[str, Any]) -> Path:
    """Write ``config`` to ``path`` as TOML (:func:`toml_text`); return ``path``."""
    Path(path).write_text(toml_text(config))
    return Path(path)


def toml_text(config: Mapping[str, Any]) -> str:
    """``config`` (tables, arrays of tables, strings, numbers, booleans, lists) as TOML."""
    lines: list[str] = []
    _table(lines, (), config, array_item=False)
    return "\n".join(lines).lstrip("\n") + "\n"


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _table(lines: list[str], path: tuple[str, ...], table: Mapping[str, Any], array_item: bool) -> None:
    """Emit one table: its header (an empty or array table needs one so it exists), its
    plain values, then its sub-tables and arrays of tables under their dotted paths."""
    plain = {k: v for k, v in table.items() if not isinstance(v, Mapping) and not _is_table_array(v)}
    dotted = ".".join(_key(k) for k in path)
    if array_item:
        lines += ["", f"[[{dotted}]]"]
    elif path and (plain or not table):
        lines += ["", f"[{dotted}]"]
    lines += [f"{_key(k)} = {_value(v)}" for k, v in plain.items()]
    for key, value in table.items():
        if isinstance(value, Mapping):
            _table(lines, (*path, key), value, array_item=False)
        elif _is_table_array(value):
            for item in value:
                _table(lines, (*path, key), item, array_item=True)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as TOML")
