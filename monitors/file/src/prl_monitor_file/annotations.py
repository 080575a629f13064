"""Per-token annotations: arrays a producer computed for the tokens of a trace's branches.

A record is ``{"version": 1, "trace_id": str, "info": {...}, "branches": [{"index": i,
"<name>": [one value per token], ...}]}``: ``index`` is the branch's position in the trace,
the arrays (``advantages``, ``trainer_logprobs``, ``entropies``, ...) are aligned with that
branch's ``token_ids``, and ``info`` holds anything scalar (step, rank, loss name).

Each producer gets its own chunked stream (:class:`~prl_monitor_file.stream.TraceStream`)::

    annotations/<producer>/00000.jsonl[.zst]      the records
    annotations/<producer>.index.jsonl            {trace_id, step, chunk, offset, branches, keys}

so a viewer showing one trace finds every producer's arrays for it through the indexes,
without reading the records of other traces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prl_monitor_file.stream import read_trace

VERSION = 1


def check(record: dict[str, Any]) -> None:
    """Raise ValueError naming what is wrong with an annotation record's shape."""
    if record.get("version") != VERSION:
        raise ValueError(f"annotation: version must be {VERSION}, got {record.get('version')!r}")
    if not isinstance(record.get("trace_id"), str) or not record["trace_id"]:
        raise ValueError("annotation: trace_id must be a non-empty string")
    branches = record.get("branches")
    if not isinstance(branches, list) or not branches:
        raise ValueError(f"annotation {record['trace_id']}: branches must be a non-empty list")
    for branch in branches:
        if not isinstance(branch, dict) or not isinstance(branch.get("index"), int) or branch["index"] < 0:
            raise ValueError(f"annotation {record['trace_id']}: every branch needs an integer index >= 0")
        arrays = [k for k, v in branch.items() if k != "index" and isinstance(v, list)]
        if not arrays:
            raise ValueError(f"annotation {record['trace_id']}: branch {branch['index']} has no per-token array")


def index_row(record: dict[str, Any], step: int | None, chunk: int, offset: int) -> dict[str, Any]:
    """The index row of one record: where it is and what it holds."""
    branches = record["branches"]
    keys = sorted({k for b in branches for k, v in b.items() if k != "index" and isinstance(v, list)})
    return {
        "trace_id": record["trace_id"],
        "step": step,
        "chunk": chunk,
        "offset": offset,
        "branches": [b["index"] for b in branches],
        "keys": keys,
    }


def producers(file_dir: str | Path) -> list[str]:
    """The producers that wrote annotations under ``file_dir`` (``monitors/file``)."""
    root = Path(file_dir) / "annotations"
    return sorted(p.name.removesuffix(".index.jsonl") for p in root.glob("*.index.jsonl"))


def read_annotations(file_dir: str | Path, producer: str, trace_id: str | None = None) -> list[dict[str, Any]]:
    """``producer``'s annotation records (of ``trace_id`` only, when given), in write order;
    chunks may be plain or sealed zstd. A torn last index line is skipped."""
    root = Path(file_dir) / "annotations"
    index = root / f"{producer}.index.jsonl"
    if not index.exists():
        return []
    out = []
    for line in index.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if trace_id is None or row["trace_id"] == trace_id:
            out.append(read_trace(root / producer, int(row["chunk"]), int(row["offset"])))
    return out
