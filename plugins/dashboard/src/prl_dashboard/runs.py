"""Finding run directories and reading their files, read-only (``docs/dashboard.md``).

A run directory (``docs/runs.md``) is recognised by what prl writes into it: ``configs/``,
``logs/`` or ``monitors/file/``. Runs are looked for up to :data:`MAX_DEPTH` levels under each
output directory, because ``run.dir`` may hold slashes. A run's id is its path relative to
its output directory; with several output directories a duplicate id is prefixed ``<k>:``.

Everything a request names (a config, a log file, a report) is resolved inside the run
directory and refused when it leaves it: the dashboard never serves a file outside a run.
Files are only ever opened for reading, so the dashboard is safe on a live run.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_DEPTH = 3
MARKERS = ("configs", "logs", "monitors")
# The resolved config of each entry point names what kind of run a directory holds.
ENTRY_FILES = {"trainer.json": "rl", "orchestrator.json": "rl", "sft.json": "sft", "eval.json": "eval"}
MAX_TEXT = 4 * 1024 * 1024  # largest config/report/log slice served in one response


class NotFound(Exception):
    """A run, file or episode that does not exist (or may not be read): HTTP 404."""


@dataclass(frozen=True)
class Run:
    """One run directory under one of the dashboard's output directories."""

    id: str
    root: Path
    path: Path

    @property
    def file_dir(self) -> Path:
        return self.path / "monitors" / "file"


def _is_run(path: Path) -> bool:
    return any((path / m).is_dir() for m in MARKERS)


def _walk(root: Path, depth: int) -> list[Path]:
    found: list[Path] = []
    try:
        entries = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return found
    for entry in entries:
        if _is_run(entry):
            found.append(entry)
        elif depth > 1:
            found.extend(_walk(entry, depth - 1))
    return found


def discover(roots: list[Path]) -> dict[str, Run]:
    """Every run under ``roots``, keyed by id (see module docstring)."""
    runs: dict[str, Run] = {}
    for k, root in enumerate(roots):
        for path in _walk(root, MAX_DEPTH):
            rid = path.relative_to(root).as_posix()
            if rid in runs:
                rid = f"{k}:{rid}"
            runs[rid] = Run(rid, root, path)
    return runs


def inside(base: Path, name: str) -> Path:
    """``base / name`` when it stays inside ``base`` (symlinks resolved), else NotFound."""
    if not name or "\x00" in name:
        raise NotFound(name)
    base_real = base.resolve()
    target = (base / name).resolve()
    if target != base_real and not target.is_relative_to(base_real):
        raise NotFound(name)
    if not target.is_file():
        raise NotFound(name)
    return target


def read_text(path: Path, limit: int = MAX_TEXT) -> str:
    """The file's text, at most its last ``limit`` bytes (a log can be large)."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        fh.seek(max(0, size - limit))
        return fh.read().decode("utf-8", errors="replace")


# ---- summaries ------------------------------------------------------------------------
def entry_of(run: Run) -> str | None:
    resolved = run.path / "configs" / "latest" / "resolved"
    for name, entry in ENTRY_FILES.items():
        if (resolved / name).is_file():
            return entry
    return None


def _attempts(run: Run) -> list[int]:
    out = set()
    for sub in ("configs", "logs"):
        base = run.path / sub
        if base.is_dir():
            out.update(int(m.group(1)) for p in base.iterdir() if (m := re.fullmatch(r"attempt_(\d+)", p.name)))
    return sorted(out)


def summary(run: Run) -> dict[str, Any]:
    """What the run list shows of one run, with its status (:mod:`prl_dashboard.status`)."""
    from prl_dashboard.status import derive

    metrics = run.file_dir / "metrics.jsonl"
    entry = entry_of(run)
    state = derive(run.path, entry)
    try:
        updated = max(p.stat().st_mtime for p in (run.path, metrics) if p.exists())
    except ValueError:
        updated = None
    return {
        "id": run.id,
        "root": str(run.root),
        "path": str(run.path),
        "entry": entry,
        "attempts": _attempts(run),
        "last_step": state["step"],
        "max_steps": state["max_steps"],
        "last_row_time": state["last_row_time"],
        "step_s": state["step_s"],
        "updated": updated,
        "status": state["status"],
        "status_reason": state["reason"],
        "live": state["status"] == "running",
        "has_metrics": metrics.is_file(),
        "has_traces": (run.file_dir / "traces" / "stream.index.jsonl").is_file(),
        "has_token_exports": (run.path / "token_exports").is_dir(),
    }


# ---- configs, logs, reports --------------------------------------------------------------
def _files_under(base: Path, pattern: str = "*") -> list[str]:
    if not base.is_dir():
        return []
    return sorted(p.relative_to(base).as_posix() for p in base.rglob(pattern) if p.is_file())


def configs(run: Run) -> list[str]:
    """Config files of the latest attempt: ``command.txt``, the root TOML, ``resolved/...``."""
    return _files_under(run.path / "configs" / "latest")


def config(run: Run, name: str) -> dict[str, Any]:
    path = inside(run.path / "configs" / "latest", name)
    text = read_text(path)
    parsed = None
    if path.suffix == ".json":
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            parsed = None
    return {"name": name, "text": text, "json": parsed}


def logfiles(run: Run) -> list[dict[str, Any]]:
    base = run.path / "logs" / "latest"
    return [{"name": n, "size": (base / n).stat().st_size} for n in _files_under(base, "*.log")]


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)")


def _merge_key(line: str, last: str) -> str:
    match = _STAMP.match(line)
    return match.group(1).replace("T", " ").replace(",", ".") if match else last


def merged_log(run: Run, limit: int = MAX_TEXT) -> list[dict[str, str]]:
    """Lines of every top-level component log, ordered by their leading timestamp.

    A line without a timestamp (a traceback, a child's raw print) keeps the time of the line
    before it in its file, so multi-line records stay together.
    """
    base = run.path / "logs" / "latest"
    rows: list[tuple[str, int, int, str, str]] = []
    if not base.is_dir():
        return []
    files = sorted(p for p in base.iterdir() if p.suffix == ".log" and p.is_file())
    for k, path in enumerate(files):
        last = ""
        for i, line in enumerate(read_text(path, limit // max(len(files), 1)).splitlines()):
            last = _merge_key(line, last)
            rows.append((last, k, i, path.stem, line))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    return [{"component": c, "line": text} for _, _, _, c, text in rows]


def log(run: Run, name: str) -> dict[str, Any]:
    return {"name": name, "text": read_text(inside(run.path / "logs" / "latest", name))}


_FRONT = re.compile(r"\A---\n(.*?)\n---\n", re.S)


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    match = _FRONT.match(text)
    if not match:
        return {}, text
    meta = {}
    for line in match.group(1).splitlines():
        key, sep, value = line.partition(":")
        if sep:
            meta[key.strip()] = value.strip().strip("\"'")
    return meta, text[match.end() :]


def reports(run: Run) -> list[dict[str, str]]:
    base = run.path / "reports"
    out = []
    for name in _files_under(base, "*.md"):
        meta, body = _front_matter(read_text(base / name, 64 * 1024))
        heading = next((ln.lstrip("# ").strip() for ln in body.splitlines() if ln.startswith("#")), "")
        out.append({"name": name, "title": meta.get("title") or heading or name})
    return out


def report(run: Run, name: str) -> dict[str, Any]:
    from prl_dashboard.markdown import render

    if not name.endswith(".md"):
        raise NotFound(name)
    meta, body = _front_matter(read_text(inside(run.path / "reports", name)))
    return {"name": name, "title": meta.get("title", name), "meta": meta, "html": render(body)}


# ---- metrics ------------------------------------------------------------------------------
def metrics(run: Run, offset: int) -> dict[str, Any]:
    """Rows of ``metrics.jsonl`` after byte ``offset``, up to the last complete line.

    The answer's ``offset`` is where the next poll starts, so a page following a live run
    only ever reads new rows. A file shorter than ``offset`` was replaced (``--clean``):
    the answer then starts again from 0 with ``reset`` set.
    """
    path = run.file_dir / "metrics.jsonl"
    if not path.is_file():
        return {"rows": [], "offset": 0, "reset": False}
    reset = False
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if offset > size:
            offset, reset = 0, True
        fh.seek(offset)
        data = fh.read(max(0, size - offset))
    end = data.rfind(b"\n") + 1  # a torn last line waits for the next poll
    rows = []
    for line in data[:end].splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return {"rows": rows, "offset": offset + end, "reset": reset}
