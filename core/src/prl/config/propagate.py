"""Copy RLConfig's shared top-level fields into trainer, orchestrator and inference.

A shared value is only a default: it fills a sub-config field the user left unset. An
explicit sub-config value that disagrees is an error listing every pair; equal values are
accepted so a dumped config loads back, and a later layer that changes a shared value
replaces the copies a dumped config carries (``release_overridden``). ``resume`` and
``weight_broadcast`` are copied over.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from prl.config.launcher_sections import owned_sections

_MISSING = object()

# (shared path, [target paths]) for leaf fields.
_LEAVES: list[tuple[str, list[str]]] = [
    ("model.name", ["trainer.model.name", "orchestrator.model.name", "inference.model.name"]),
    ("model.vlm", ["trainer.model.vlm", "orchestrator.model.vlm"]),
    ("model.lora", ["trainer.model.lora", "orchestrator.model.lora", "inference.model.lora"]),
    ("log.level", ["trainer.log.level", "orchestrator.log.level", "inference.log.level"]),
    ("log.json_logging", ["trainer.log.json_logging", "orchestrator.log.json_logging", "inference.log.json_logging"]),
    ("tokenizer.name", ["trainer.tokenizer.name", "orchestrator.tokenizer.name"]),
    (
        "tokenizer.trust_remote_code",
        ["trainer.tokenizer.trust_remote_code", "orchestrator.tokenizer.trust_remote_code"],
    ),
    (
        "tokenizer.chat_template",
        [
            "trainer.tokenizer.chat_template",
            "orchestrator.tokenizer.chat_template",
            "inference.tokenizer.chat_template",
        ],
    ),
    ("max_steps", ["trainer.max_steps", "orchestrator.max_steps"]),
    *[
        (f"rollout_transport.{key}", [f"trainer.rollout_transport.{key}", f"orchestrator.rollout_transport.{key}"])
        for key in ("type", "host", "port", "hwm")
    ],
    ("seq_len", ["trainer.model.seq_len", "orchestrator.seq_len"]),
    ("output_dir", ["trainer.output_dir", "orchestrator.output_dir", "inference.output_dir"]),
]
_CKPT_FIELDS = ("output_dir", "interval", "keep_last", "keep_interval")
_COPIED_OVER = {"resume": ["trainer", "orchestrator"], "weight_broadcast": ["trainer", "orchestrator"]}
_RUN_TARGETS = ("trainer", "orchestrator", "inference")


def _get(data: dict, path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _set(data: dict, path: str, value: Any) -> None:
    parts = path.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None and part == "inference" and "inference" in node:
            return  # inference switched off: nothing to fill
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def _fill(data: dict, target: str, value: Any, conflicts: list[str], source: str) -> None:
    if target.startswith("inference.") and data.get("inference", {}) is None:
        return
    current = _get(data, target)
    if current is _MISSING:
        _set(data, target, copy.deepcopy(value))
    elif not _same(current, value):
        conflicts.append(f"{source}={value!r} vs {target}={current!r}")


def _section_components(shared: str) -> tuple[str, ...]:
    """Which sub-configs a shared section reaches: both, except a monitor whose class names
    fewer in ``rl_components`` (prime: the orchestrator only) and a launcher's own section,
    which reaches the inference server's."""
    both = ("trainer", "orchestrator")
    if shared in owned_sections():
        return ("inference",)
    if not shared.startswith("monitors."):
        return both
    from prl.plugins import get_registry

    cls = get_registry().classes("monitors").get(shared.removeprefix("monitors."))
    return tuple(getattr(cls, "rl_components", both)) if cls is not None else both


def _check_output_dirs(data: dict) -> None:
    """The run's ``output_dir`` (given, else ``$PRL_OUTPUT_DIR`` or ``outputs``) decides the
    run directory; a component's own ``output_dir`` that differs would be replaced, so it is
    refused instead."""
    if "output_dir" in data:
        return  # compared with each component's as a shared leaf
    from prl.config.sections import default_output_dir

    run = default_output_dir()
    for comp in ("trainer", "orchestrator", "inference"):
        section = data.get(comp)
        own = section.get("output_dir") if isinstance(section, dict) else None
        if own is not None and Path(str(own)).expanduser().resolve() != Path(run).resolve():
            raise ValueError(
                f"{comp}.output_dir '{own}' differs from the run's output_dir '{run}': "
                "set the top-level output_dir instead"
            )


def propagate_shared(raw: dict) -> dict:
    data = copy.deepcopy(raw)
    conflicts: list[str] = []
    _check_output_dirs(data)
    for shared, targets in _LEAVES:
        value = _get(data, shared)
        if value is not _MISSING and value is not None:
            for target in targets:
                _fill(data, target, value, conflicts, shared)
    _propagate_sections(data, conflicts)
    for key, targets in _COPIED_OVER.items():
        if key in data:
            for target in targets:
                data.setdefault(target, {})
                data[target][key] = copy.deepcopy(data[key])
    if "run" in data:
        for target in _RUN_TARGETS:
            if data.get(target, {}) is not None:
                _fill(data, f"{target}.run", data["run"], conflicts, "run")
    if conflicts:
        raise ValueError("Shared config conflicts with matching sub-config field(s): " + "; ".join(conflicts))
    return data


def release_overridden(lower: dict, upper: dict) -> dict:
    """``lower`` without the component copies of the shared values that ``upper`` sets again.

    A dumped RLConfig (a batch launcher's ``resolved/rl.json``) holds each shared value at
    the top and again in every component it reached. When a later layer (a file to its
    right, a flag) changes the shared value, a component value equal to ``lower``'s shared
    value is such a copy: it goes, and propagation fills it from the new value. A component
    value that differs was set on purpose and still meets the conflict check.
    """
    out = copy.deepcopy(lower)
    for shared, targets in _shared_pairs(lower):
        old = _get(lower, shared)
        if old is _MISSING or _get(upper, shared) is _MISSING:
            continue
        for target in targets:
            current = _get(lower, target)
            if current is not _MISSING and _get(upper, target) is _MISSING and _same(current, old):
                _delete(out, target)
    return out


def _shared_pairs(data: dict) -> list[tuple[str, list[str]]]:
    """(shared path, component paths) for every shared value ``data`` may have copied."""
    pairs = [*_LEAVES, ("run", [f"{c}.run" for c in _RUN_TARGETS])]
    for section, fields in _shared_sections(data):
        value = _get(data, section)
        for name in (fields or value) if isinstance(value, dict) else ():
            pairs.append((f"{section}.{name}", [f"{c}.{section}.{name}" for c in _section_components(section)]))
    return pairs


def _same(a: Any, b: Any) -> bool:
    return a == b or str(a) == str(b)


def _delete(data: dict, path: str) -> None:
    *parents, last = path.split(".")
    node = _get(data, ".".join(parents)) if parents else data
    if isinstance(node, dict):
        node.pop(last, None)


def _shared_sections(data: dict) -> list[tuple[str, tuple[str, ...] | None]]:
    """The optional shared sections ``data`` has, each with the fields it fills in the
    components (None: every field it sets)."""
    sections: list[tuple[str, tuple[str, ...] | None]] = []
    if "ckpt" in data:
        sections.append(("ckpt", _CKPT_FIELDS))
    # A launcher's section only fills inference's where set: a null one propagates nothing.
    sections += [(tag, None) for tag in owned_sections() if isinstance(data.get(tag), dict)]
    monitors = data.get("monitors")
    for key in monitors if isinstance(monitors, dict) else {}:
        sections.append((f"monitors.{key}", None))
    return sections


def _propagate_sections(data: dict, conflicts: list[str]) -> None:
    """Optional shared sections: ``[ckpt]`` and ``[monitors.<key>]`` turn on (or off) in
    trainer and orchestrator, then fill their fields; a launcher's own section (``[slurm]``)
    does so in inference."""
    for shared, fields in _shared_sections(data):
        value = _get(data, shared)
        if value is not None and not isinstance(value, dict):
            continue  # not a table: validating the shared field itself reports it
        for comp in _section_components(shared):
            target = f"{comp}.{shared}"
            if value is None:
                _set(data, target, None)
                continue
            current = _get(data, target)
            if current is _MISSING or current is None:
                _set(data, target, {})
            for name in fields or value.keys():
                if name in value:
                    _fill(data, f"{target}.{name}", value[name], conflicts, f"{shared}.{name}")
