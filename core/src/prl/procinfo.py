"""Which processes make up an attempt of a run, and what state each is in.

Launchers and the orchestrator append one JSON line per process they start to
``<attempt log dir>/processes.jsonl`` (``{"name", "pid", "log", "time"}``, plus ``"exit"``
once a launcher saw it fail); the newest line of a name wins, so a restarted process simply
appends again. A JSON-lines file rather than one JSON object because several processes (the
launcher, the orchestrator for its env servers) write to it: each line is one ``write`` on an
``O_APPEND`` descriptor and never interleaves with another's. The stall watchdog reads it to
name a process by pid and quote its last log line; the end-of-run summary names the process
that failed; users read it to find which pid to look at.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

PROCESSES = "processes.jsonl"
STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "in uninterruptible I/O",
    "T": "stopped (SIGSTOP)",
    "t": "stopped by a debugger",
    "Z": "a zombie",
    "X": "dead",
}


def record(log_dir: str | os.PathLike | None, name: str, pid: int, log: str | os.PathLike | None) -> None:
    """Append ``name``'s ``pid`` and log file to the attempt's process list (no-op without a
    log dir: a component started by hand outside a run)."""
    if not log_dir:
        return
    path = Path(log_dir) / PROCESSES
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"name": name, "pid": pid, "log": str(log) if log else None, "time": round(time.time(), 3)})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def record_exit(log_dir: str | os.PathLike | None, name: str, code: int) -> None:
    """Append that ``name`` exited with ``code`` (a launcher, when a child ends the run):
    the end-of-run summary names the process that failed from it. The line repeats the
    pid and log of the start line, since the newest line of a name wins."""
    if not log_dir:
        return
    started = read(log_dir).get(name, {})
    row = {"name": name, "pid": started.get("pid"), "log": started.get("log"), "time": started.get("time")}
    row.update(exit=code, exit_time=round(time.time(), 3))
    fd = os.open(Path(log_dir) / PROCESSES, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(row) + "\n").encode())
    finally:
        os.close(fd)


def read(log_dir: str | os.PathLike | None) -> dict[str, dict]:
    """``{name: {"pid", "log", "time"}}`` of the attempt, the newest line of each name."""
    path = Path(log_dir) / PROCESSES if log_dir else None
    if path is None or not path.exists():
        return {}
    out: dict[str, dict] = {}
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
            out[str(row["name"])] = row
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line of a crashed writer
    return out


def state(pid: int | None) -> str | None:
    """The kernel's one-letter state of ``pid`` (``/proc/<pid>/stat``: R, S, D, T, Z...);
    None where it cannot be read (no such process, not Linux)."""
    if not pid:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces or ')'.
    rest = stat[stat.rfind(")") + 1 :].split()
    return rest[0] if rest else None


def describe(pid: int | None) -> str:
    """``pid 123, stopped (SIGSTOP)``, ``pid 123 gone``, or ``pid unknown``."""
    if not pid:
        return "pid unknown"
    letter = state(pid)
    if letter is None:
        return f"pid {pid} gone" if Path("/proc").is_dir() else f"pid {pid}"
    return f"pid {pid}, {STATES.get(letter, letter)}"


def last_line(path: str | os.PathLike | None, limit: int = 160) -> str | None:
    """The last non-empty line of a log file (its final 8 KiB read), cut to ``limit`` characters."""
    if not path:
        return None
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 8192))
            tail = fh.read().decode(errors="replace")
    except OSError:
        return None
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if not lines:
        return None
    text = lines[-1]
    return text if len(text) <= limit else text[: limit - 3] + "..."
