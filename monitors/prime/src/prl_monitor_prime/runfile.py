"""``<run_dir>/monitors/prime/run.json`` and what the monitor learns from the resolved configs.

``run.json`` is ``{"runs": [entry, ...]}`` with one entry per platform run a prl run opened:
``producer``, ``source`` (null for a training run), ``kind`` (``train``/``eval``), ``id``,
``name``, ``url`` (null when disabled), ``mode`` and ``status`` (``running`` until the
process closes it, then prime-runs' terminal status). Trainer and online-eval of one
``prl sft`` write it from two processes, so every update is a read-merge-write under an
exclusive lock, replacing the entry with the same id and written atomically.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prl.fsutil import write_atomic

# The resolved config each producer's process loads (configs/latest/resolved/<name>.json).
RESOLVED = {"orch": ("orchestrator",), "trainer": ("trainer", "sft"), "eval": ("eval",), "online-eval": ("sft",)}


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".run.json.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def read(directory: Path) -> list[dict[str, Any]]:
    """The entries of ``directory/run.json`` (none when it does not exist yet)."""
    path = Path(directory) / "run.json"
    return json.loads(path.read_text())["runs"] if path.exists() else []


def record(directory: Path, entry: dict[str, Any]) -> None:
    """Add ``entry`` to ``run.json``, replacing an earlier entry with the same id."""
    with _locked(directory):
        runs = [r for r in read(directory) if r.get("id") != entry["id"]]
        runs.append(entry)
        write_atomic(directory / "run.json", json.dumps({"runs": runs}, indent=2) + "\n")


def resolved_meta(run_dir: Path, producer: str) -> dict[str, Any]:
    """Model, train environments and training shape from the producer's resolved config,
    for the platform run's header; empty when the process was started without one."""
    resolved = Path(run_dir) / "configs" / "latest" / "resolved"
    for name in RESOLVED.get(producer, ()):
        path = resolved / f"{name}.json"
        if path.exists():
            try:
                return _meta(json.loads(path.read_text()))
            except (ValueError, TypeError, AttributeError):
                return {}
    return {}


def _meta(cfg: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"model": (cfg.get("model") or {}).get("name")}
    train = cfg.get("train") or {}
    sources = [s["name"] for s in train.get("source") or [] if s.get("name")]
    if sources:
        meta["environments"] = sources
    training = {
        "max_steps": cfg.get("max_steps") or 0,
        "batch_size": cfg.get("batch_size") or (cfg.get("data") or {}).get("batch_size"),
        "rollouts_per_example": train.get("group_size"),
        "seq_len": cfg.get("seq_len") or (cfg.get("data") or {}).get("seq_len"),
    }
    meta["training"] = {k: v for k, v in training.items() if v is not None}
    return meta
