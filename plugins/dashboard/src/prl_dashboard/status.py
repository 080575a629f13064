"""A run's status (running, finished, failed, stalled), read from its directory alone.

Signals, each something a run writes (``docs/runs.md``, ``docs/monitoring.md``):

* the processes of the latest attempt (``logs/latest/processes.jsonl``, written by the
  launcher and the orchestrator): whether any is still alive on this machine. A pid is
  only believed when its process started before the line naming it was written, so a pid
  the kernel reused for something else does not keep a dead run "running";
* how far it got: the largest step in ``metrics.jsonl`` against ``max_steps`` of its
  resolved config, or for ``prl eval`` a summary ``results/<env>.json`` per source;
* errors in the tail of each component log (a traceback, an ``ERROR`` line);
* the stall watchdog's rows (``watcher/stalled_s`` with ``watcher/waiting_on``) and the
  time since the last metric row compared with the run's own step time.

The rules, first match wins: alive and the watchdog says stalled, or silent for longer
than :func:`stall_after` -> stalled; alive -> running; reached its last step -> finished;
processes known and all gone -> failed; not tracked (a SLURM job on another host, an older
run) and recent -> running; silent past the threshold -> failed when a log shows an
error, else stalled.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

MIN_STALL_S = 60.0  # never call a run stalled sooner (the watchdog's own floor)
STALL_FACTOR = 5.0  # ... nor before this many typical step times passed without a row
FIRST_STEP_S = 600.0  # model loading and the first step: silence allowed before step 1
LOG_TAIL = 16 * 1024
METRICS_TAIL = 512 * 1024
_ERROR = re.compile(r"Traceback \(most recent call last\)|\b(ERROR|CRITICAL)\b|exited with code|was killed by")


def _start_time(pid: int) -> float | None:
    """When ``pid`` started (epoch seconds) from /proc; None when it is not running."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        lines = Path("/proc/stat").read_text().splitlines()
        boot = next(float(ln.split()[1]) for ln in lines if ln.startswith("btime"))
    except (OSError, StopIteration, ValueError):
        return None
    fields = stat[stat.rfind(")") + 1 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None  # a zombie has exited; only its parent has not reaped it
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def processes(log_dir: Path) -> tuple[bool | None, float | None]:
    """(any recorded process alive, when the attempt's first process started); (None, None)
    when the attempt records no processes."""
    path = log_dir / "processes.jsonl"
    newest: dict[str, dict] = {}
    try:
        for line in path.read_text(errors="replace").splitlines():
            try:
                row = json.loads(line)
                newest[str(row["name"])] = row
            except (ValueError, KeyError, TypeError):
                continue
    except OSError:
        return None, None
    if not newest:
        return None, None
    alive = False
    for row in newest.values():
        started = _start_time(int(row.get("pid") or 0)) if row.get("pid") else None
        if started is not None and started <= float(row.get("time") or 0) + 5:
            alive = True
    return alive, min(float(r.get("time") or time.time()) for r in newest.values())


def log_error(log_dir: Path) -> str | None:
    """The last error line in the tail of any component log, with its file name."""
    found: tuple[float, str] | None = None
    try:
        files = [p for p in log_dir.iterdir() if p.suffix == ".log" and p.is_file()]
    except OSError:
        return None
    for path in files:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - LOG_TAIL))
            lines = fh.read().decode("utf-8", errors="replace").splitlines()
        hits = [ln for ln in lines if _ERROR.search(ln)]
        if hits and (found is None or path.stat().st_mtime > found[0]):
            # After a traceback the exception itself is the last line: the useful one.
            last = lines[-1] if "Traceback" in hits[-1] and lines else hits[-1]
            found = (path.stat().st_mtime, f"{path.name}: {last.strip()[:200]}")
    return found[1] if found else None


def metric_tail(metrics: Path) -> dict[str, Any]:
    """Last step, time of the last row, median step time and the watchdog's last verdict
    from the tail of ``metrics.jsonl``."""
    out: dict[str, Any] = {"step": None, "time": None, "step_s": None, "stalled_on": None}
    try:
        with open(metrics, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - METRICS_TAIL))
            lines = fh.read().splitlines()
    except OSError:
        return out
    first_seen: dict[int, float] = {}
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict):
            continue
        stamp = row.get("time")
        if isinstance(stamp, int | float):
            out["time"] = max(out["time"] or 0.0, float(stamp))
        step = row.get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            out["step"] = max(out["step"] or 0, step)
            if isinstance(stamp, int | float):
                first_seen.setdefault(step, float(stamp))
            out["stalled_on"] = None  # a step after a stall row: progress came back
        elif "watcher/waiting_on" in row:
            code = row.get("watcher/waiting_on")
            out["stalled_on"] = code if code else None
    times = [first_seen[s] for s in sorted(first_seen)]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False) if b >= a]
    out["step_s"] = statistics.median(gaps[-20:]) if gaps else None
    return out


def stall_after(step_s: float | None, has_step: bool) -> float:
    """Seconds without a metric row after which a run counts as stalled."""
    if not has_step:
        return FIRST_STEP_S
    return max(MIN_STALL_S, STALL_FACTOR * (step_s or 0.0))


WAITING_ON = {1: "inference", 2: "an env server", 3: "the trainer", 4: "the orchestrator"}


def _max_steps(resolved: Path) -> int | None:
    for name in ("trainer.json", "sft.json", "orchestrator.json"):
        try:
            value = json.loads((resolved / name).read_text()).get("max_steps")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, int):
            return value
    return None


def _eval_progress(run_dir: Path) -> tuple[int, int]:
    """For ``prl eval``: (sources with their summary file, sources in the resolved config)."""
    try:
        cfg = json.loads((run_dir / "configs" / "latest" / "resolved" / "eval.json").read_text())
    except (OSError, ValueError):
        return 0, 0
    names = [s.get("name") for s in cfg.get("source") or [] if isinstance(s, dict)]
    return sum((run_dir / "results" / f"{n}.json").is_file() for n in names), len(names)


def derive(run_dir: Path, entry: str | None, now: float | None = None) -> dict[str, Any]:
    """``{"status", "reason", "step", "max_steps", "last_row_time", "step_s"}`` of a run."""
    now = time.time() if now is None else now
    log_dir = run_dir / "logs" / "latest"
    tail = metric_tail(run_dir / "monitors" / "file" / "metrics.jsonl")
    max_steps = _max_steps(run_dir / "configs" / "latest" / "resolved")
    alive, started = processes(log_dir)
    last = tail["time"] or started
    if last is None:
        try:
            last = log_dir.resolve().stat().st_mtime
        except OSError:
            last = None
    silent = now - last if last is not None else None
    limit = stall_after(tail["step_s"], tail["step"] is not None)
    at = f"step {tail['step'] if tail['step'] is not None else '–'}" + (f" of {max_steps}" if max_steps else "")
    if entry == "eval":
        summarised, sources = _eval_progress(run_dir)
        done, at = sources > 0 and summarised == sources, f"{summarised} of {sources} sources summarised"
    else:
        done = max_steps is not None and tail["step"] is not None and tail["step"] >= max_steps
    status, reason = _verdict(alive, done, silent, limit, tail["stalled_on"], run_dir, at)
    return {
        "status": status,
        "reason": reason,
        "step": tail["step"],
        "max_steps": max_steps,
        "last_row_time": tail["time"],
        "step_s": tail["step_s"],
    }


def _verdict(alive, done, silent, limit, stalled_on, run_dir: Path, at: str) -> tuple[str, str]:
    quiet = f"no new metric for {silent:.0f} s" if silent is not None else "no metrics"
    if alive and stalled_on:
        return "stalled", f"the watchdog reports waiting for {WAITING_ON.get(stalled_on, 'a component')} ({at})"
    if alive and silent is not None and silent > limit:
        return "stalled", f"{quiet} (threshold {limit:.0f} s, {at}); its processes are still alive"
    if alive:
        return "running", f"{at}; processes alive"
    if done:
        return "finished", f"reached {at}" if at.startswith("step") else at
    error = log_error(run_dir / "logs" / "latest")
    if alive is False:
        return "failed", f"its processes have exited at {at}" + (f"; {error}" if error else "")
    if silent is not None and silent <= limit and not error:
        return "running", f"{at}; last metric {silent:.0f} s ago"
    if error:
        return "failed", error
    return "stalled", f"{quiet} (threshold {limit:.0f} s, {at}) and no process of it is tracked here"
