"""Episodes of a run: the trace index, one full trace, and its per-token overlays.

The file monitor writes one summary row per episode to ``traces/stream.index.jsonl`` and
the episode itself to a stream chunk (``docs/monitoring.md``). An episode is addressed by
its line number in the index, so a page keeps working while new episodes are appended.

Per-token overlays of a branch come from three places, joined by trace id and branch index:

* the trace itself: the sampler's logprobs, the algorithm's advantages and loss weights,
  which tokens the policy sampled and the role of each token;
* the trainer's token export (``token_exports/step_<S>/rank_<r>.jsonl``, written with
  ``trainer.enable_token_export``): trainer logprobs, entropy, mismatch KL, the loss mask
  and the trust-region masks the trainer computed for that sequence;
* per-token annotations (``monitors/file/annotations/<producer>``) of any producer.
"""

from __future__ import annotations

import json
import logging
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from prl import layout
from prl_dashboard.runs import NotFound, Run

log = logging.getLogger("prl.dashboard")

# branch field -> overlay name (the sampler's logprobs are named for where they came from)
TRACE_OVERLAYS = {
    "logprobs": "sampler_logprobs", "advantages": "advantages", "sampled_mask": "sampled_mask",
    "rl_weights": "rl_weights", "ce_weights": "ce_weights", "ref_kl_weights": "ref_kl_weights",
}  # fmt: skip
EXPORT_OVERLAYS = (
    "trainer_logprobs", "entropy", "mismatch_kl", "importance_ratio", "prob_delta",
    "loss_mask", "is_masked", "is_masked_high", "is_masked_low",
)  # fmt: skip
FILTERS = ("kind", "env", "step", "id")  # id: where a live episode landed once it ended


def index_rows(run: Run) -> list[dict[str, Any]]:
    """Every row of the index, with its ``line`` number; torn or foreign lines skipped."""
    path = run.file_dir / "traces" / "stream.index.jsonl"
    rows: list[dict[str, Any]] = []
    if not path.is_file():
        return rows
    with open(path, "rb") as fh:
        for line_no, line in enumerate(fh):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                row["line"] = line_no
                rows.append(row)
    return rows


def page(run: Run, query: dict[str, str]) -> dict[str, Any]:
    """A page of index rows, newest first, filtered by ``kind``, ``env`` and ``step``."""
    rows = index_rows(run)
    for key in FILTERS:
        want = query.get(key)
        if want not in (None, ""):
            rows = [r for r in rows if str(r.get(key)) == want]
    rows.reverse()
    offset, limit = _int(query, "offset", 0), min(_int(query, "limit", 50), 500)
    envs = sorted({str(r.get("env")) for r in rows})
    return {"total": len(rows), "offset": offset, "rows": rows[offset : offset + limit], "envs": envs}


def _int(query: dict[str, str], key: str, default: int) -> int:
    try:
        value = int(query.get(key, default))
    except ValueError:
        value = -1
    if value < 0:  # refused, not clamped: the OpenAPI document says minimum 0
        raise BadQuery(f"{key}: expected a non-negative integer, got {query.get(key)!r}")
    return value


class BadQuery(ValueError):
    """A malformed query parameter: HTTP 400."""


def episode(run: Run, line: int) -> dict[str, Any]:
    """The index row, the full trace record and the per-token overlays of each branch."""
    from prl_monitor_file import read_trace

    rows = index_rows(run)
    row = next((r for r in rows if r["line"] == line), None)
    if row is None:
        raise NotFound(f"episode {line}")
    try:
        trace = read_trace(run.file_dir / "traces" / "stream", int(row["chunk"]), int(row["offset"]))
    except (OSError, ValueError, KeyError) as exc:
        raise NotFound(f"episode {line}: {exc}") from None
    exports = token_exports(run, str(row.get("id")), row.get("step"))
    with _TOKENIZER_LOCK:
        tokenizer, tok_name, tok_error = _tokenizer(str(run.path))
    notes, producer_of = annotations(run, str(row.get("id")))
    branches = []
    for index, branch in enumerate(trace.get("branches") or []):
        ids = branch.get("token_ids") or []
        overlays = {name: branch[key] for key, name in TRACE_OVERLAYS.items() if isinstance(branch.get(key), list)}
        export = exports.get(index)
        if export is not None:
            overlays.update(_aligned(export, len(ids)))
        for name, values in notes.get(index, {}).items():
            key = name if name not in overlays else f"{name} ({producer_of[name]})"
            overlays[key] = (values + [None] * len(ids))[: len(ids)]
        text = _decode(tokenizer, ids)
        if tokenizer is not None and text is None:
            tok_error = "it could not decode this trace's token ids"
        branches.append({
            "index": index, "agent": branch.get("agent"), "roles": branch.get("roles"), "token_ids": ids,
            "tokens": text, "overlays": overlays, "export_step": (export or {}).get("step"),
        })  # fmt: skip
    return {"row": row, "trace": trace, "branches": branches, "tokenizer": {"name": tok_name, "error": tok_error}}


def annotations(run: Run, trace_id: str) -> tuple[dict[int, dict[str, list]], dict[str, str]]:
    """Per-token arrays every producer annotated ``trace_id`` with (``monitors/file/
    annotations``), by branch index; a producer's later record of a branch wins. Also which
    producer each array came from."""
    from prl_monitor_file import producers, read_annotations

    by_branch: dict[int, dict[str, list]] = {}
    source: dict[str, str] = {}
    for producer in producers(run.file_dir):
        for record in read_annotations(run.file_dir, producer, trace_id):
            for branch in record.get("branches") or []:
                arrays = {k: v for k, v in branch.items() if k != "index" and isinstance(v, list)}
                by_branch.setdefault(int(branch.get("index", 0)), {}).update(arrays)
                source.update(dict.fromkeys(arrays, producer))
    return by_branch, source


def _aligned(export: dict[str, Any], n: int) -> dict[str, list]:
    """Export arrays cut or padded to the branch's ``n`` tokens (the trainer truncates at
    ``seq_len``; tokens it never saw get null)."""
    out = {}
    for name in EXPORT_OVERLAYS:
        values = export.get(name)
        if isinstance(values, list):
            out[name] = (values + [None] * n)[:n]
    return out


def token_exports(run: Run, trace_id: str, step: Any) -> dict[int, dict[str, Any]]:
    """Token-export rows of ``trace_id`` by branch index; the trace's own step is read first."""
    base = run.path / "token_exports"
    if not base.is_dir():
        return {}
    dirs = sorted(p for p in base.iterdir() if layout.parse_step(p.name) is not None)
    own = layout.step_dir(base, step)
    if own in dirs:
        dirs.remove(own)
        dirs.insert(0, own)
    needle = json.dumps(trace_id)
    for step_dir in dirs:
        found = {}
        for path in sorted(step_dir.glob("rank_*.jsonl")):
            with open(path, encoding="utf-8") as fh:
                for line in fh:
                    if needle not in line:  # cheap filter before parsing a long line
                        continue
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if rec.get("trace_id") == trace_id:
                        found[int(rec.get("branch_index", 0))] = rec
        if found:
            return found
    return {}


# One loader at a time: two request threads importing transformers at once can see it
# half-initialised (an ImportError), and the cache below would keep that failure.
_TOKENIZER_LOCK = threading.Lock()


@lru_cache(maxsize=16)
def _tokenizer(run_path: str) -> tuple[Any, str | None, str | None]:
    """(tokenizer, its name, why it could not be loaded) for the run's resolved config.

    Loaded from a local directory or the local Hugging Face cache only: the dashboard never
    downloads. When it cannot load, the viewer shows token ids and says why.
    """
    name = _tokenizer_name(Path(run_path) / "configs" / "latest" / "resolved")
    if not name:
        return None, None, "the run's resolved config names no model or tokenizer"
    missing = _offline_problem(name)
    if missing:
        return None, name, missing  # importing transformers only to fail costs seconds per run
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        return None, name, f"transformers cannot be imported ({exc}; pip install prl-dashboard[tokens])"
    try:
        return AutoTokenizer.from_pretrained(name, local_files_only=True), name, None
    except Exception as exc:  # any failure only costs the token text, and is shown
        log.info("dashboard: no tokenizer for %s (%s); showing token ids", name, exc)
        return None, name, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


def _tokenizer_name(resolved: Path) -> str | None:
    for fname in ("trainer.json", "orchestrator.json", "sft.json", "eval.json", "inference.json"):
        try:
            cfg = json.loads((resolved / fname).read_text())
        except (OSError, json.JSONDecodeError):
            continue
        name = (cfg.get("tokenizer") or {}).get("name") or (cfg.get("model") or {}).get("name")
        if name:
            return str(name)
    return None


def _offline_problem(name: str) -> str | None:
    """Why ``name`` cannot be loaded without a download, or None when it can be tried: a
    path must be an existing directory (a relative one is resolved from the dashboard's
    own directory, where it rarely exists), a hub id must be in the local cache."""
    from prl import hub

    if hub.is_local(name):
        path = Path(name).expanduser()
        if path.is_dir():
            return None
        where = "" if path.is_absolute() else f" (relative to the dashboard's directory {Path.cwd()})"
        return f"no model directory {name}{where}"
    if hub.local_dir(name) is None:
        return f"not a local directory and not in the local Hugging Face cache {hub.hf_hub_cache()}"
    return None


def _decode(tokenizer, ids: list[int]) -> list[str] | None:
    if tokenizer is None:
        return None
    try:
        return [tokenizer.decode([i]) for i in ids]
    except Exception:
        return None
