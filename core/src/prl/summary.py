"""What ``prl rl``, ``prl sft`` and ``prl eval`` print around a run: where its logs are as
it starts, and at the end a summary read back from the run directory (``docs/runs.md``).

Everything at the end comes from files any launcher leaves behind, so the summary is the
same for a run the local launcher supervised and one another launcher plugin ran:

* the headline metric from the file monitor's ``metrics.jsonl``: the orchestrator's
  ``reward/all/mean`` for RL, the trainer's ``loss/mean`` for SFT, first step -> last;
* the newest complete checkpoint (:mod:`prl.layout`) and the commands that use it;
* on failure, the process that failed: the launcher appends its exit code to the
  attempt's ``processes.jsonl`` (:func:`prl.procinfo.record_exit`).
"""

from __future__ import annotations

import json
import shlex
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prl import layout, procinfo

USAGE_EXIT = 2
# entry -> (resolved config holding the metric's monitors, producer, metric names, label)
HEADLINE = {
    "rl": ("orchestrator", "orch", ("reward/all/mean",), "reward"),
    "sft": ("sft", "trainer", ("loss/mean", "loss/all"), "loss"),
}
# entry -> resolved config holding [ckpt]
CKPT_CONFIG = {"rl": "trainer", "sft": "sft"}


def start_lines(run_dir: Path, log_dir: Path, logs: dict[str, Path]) -> list[str]:
    """The two lines printed before any process starts: the run directory, then what is
    starting and where each one logs (the first output of a model load can take a while)."""
    names = ", ".join(logs)
    files = ", ".join(_rel(p, log_dir) for p in logs.values())
    return [f"Run directory: {run_dir}", f"Starting {names} ... (logs: {log_dir}: {files})"]


def _rel(path: Path, base: Path) -> str:
    try:
        return str(Path(path).relative_to(base))
    except ValueError:
        return str(path)


def _resolved(run_dir: Path, name: str) -> dict[str, Any]:
    return _load(run_dir / "configs" / "latest" / "resolved" / f"{name}.json")


def metrics_file(run_dir: Path, config: dict[str, Any]) -> Path:
    """``metrics.jsonl`` of the file monitor as ``config`` (a resolved config) sets it up."""
    path = ((config.get("monitors") or {}).get("file") or {}).get("path")
    base = Path(path) if path else Path("monitors") / "file"
    return (base if base.is_absolute() else run_dir / base) / "metrics.jsonl"


def metric_series(path: Path, producer: str, names: tuple[str, ...]) -> list[tuple[int, float]]:
    """``(step, value)`` of the first of ``names`` a ``producer``'s rows carry, by step. A
    resumed run appends the steps it redoes, so the later row of a step wins."""
    by_step: dict[int, float] = {}
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a row cut short by a crash
        if not isinstance(row, dict) or row.get("producer") != producer or row.get("step") is None:
            continue
        value = next((row[n] for n in names if isinstance(row.get(n), (int, float))), None)
        if value is not None:
            by_step[int(row["step"])] = float(value)
    return sorted(by_step.items())


def last_checkpoint(run_dir: Path, entry: str) -> Path | None:
    config = _resolved(run_dir, CKPT_CONFIG.get(entry, entry))
    ckpt = config.get("ckpt")
    if not ckpt:
        return None
    root = Path(ckpt["output_dir"]) if ckpt.get("output_dir") else run_dir / "checkpoints"
    step = layout.latest_complete(root, layout.COMPONENTS[entry])
    return None if step is None else layout.step_dir(root, step)


def failed_process(log_dir: Path) -> tuple[str, str | None] | None:
    """``(name, log file)`` of the first process whose exit ended the attempt (launchers
    record only those, a service that exited cleanly included)."""
    rows = [r for r in procinfo.read(log_dir).values() if "exit" in r]
    if not rows:
        return None
    first = min(rows, key=lambda r: r.get("exit_time", r.get("time", 0)))
    return str(first["name"]), first.get("log")


@dataclass
class Outcome:
    """How a run ended, as the command that ran it saw it."""

    entry: str
    run_dir: Path
    log_dir: Path
    code: int
    wall_s: float
    in_process: dict[str, Path] = field(default_factory=dict)
    """Components run inside the command's own process: the one to blame on failure."""


def end_lines(out: Outcome) -> list[str]:
    """The summary printed when a run ends (see the module docstring)."""
    ok, signalled = out.code == 0, _signal_name(out.code)
    if ok:
        head = f"Run finished in {out.wall_s:.0f}s"
    elif signalled:  # the user stopped it (Ctrl-C, kill): nothing to blame
        head = f"Run stopped by {signalled} after {out.wall_s:.0f}s"
    else:
        head = f"Run failed after {out.wall_s:.0f}s (exit code {out.code})"
    lines = [f"{head}: {out.run_dir}"]
    if not ok and not signalled:
        lines.append(f"  failed:          {_blame(out)}")
    lines.extend(_headline(out))
    ckpt = last_checkpoint(out.run_dir, out.entry)
    if ckpt is not None:
        lines.append(f"  last checkpoint: {ckpt}")
    lines.append(f"  logs:            {out.log_dir}")
    if ok:
        lines.extend(next_commands(out.entry, out.run_dir, ckpt))
    return lines


def _signal_name(code: int) -> str | None:
    """SIGINT for exit code 130 (128 + the signal number, as launchers return it)."""
    if code <= 128:
        return None
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return None


def _blame(out: Outcome) -> str:
    found = failed_process(out.log_dir)
    if found is None and len(out.in_process) == 1:
        name, log = next(iter(out.in_process.items()))
        found = (name, str(log))
    if found is None:
        return f"see the logs in {out.log_dir}"
    name, log = found
    return f"{name} (log: {log})" if log else name


def _headline(out: Outcome) -> list[str]:
    if out.entry not in HEADLINE:
        return []
    config_name, producer, names, label = HEADLINE[out.entry]
    series = metric_series(metrics_file(out.run_dir, _resolved(out.run_dir, config_name)), producer, names)
    if not series:
        return [f"  {label + ':':<16} no step finished"]
    (s0, v0), (s1, v1) = series[0], series[-1]
    return [f"  {label + ':':<16} {v0:.4f} → {v1:.4f} (step {s0} → {s1})"]


def next_commands(entry: str, run_dir: Path, ckpt: Path | None) -> list[str]:
    """What to run next: export the checkpoint, look at the run, evaluate the export."""
    output_dir = _resolved(run_dir, CKPT_CONFIG.get(entry, entry)).get("output_dir") or run_dir.parent
    lines = ["Next:"]
    if ckpt is None:
        lines.append("  (no checkpoint saved: set --ckpt.interval, or [ckpt], to get one to export)")
    else:
        weights = shlex.quote(str(ckpt / "weights"))
        lines += [
            f"  prl export {shlex.quote(str(ckpt))}   # Hugging Face weights into {weights}",
            f"  prl inference --model.name {weights}   # serves them; then, in another shell:",
            f"  prl eval {_taskset(run_dir)} --model.name {weights}",
        ]
    lines.append(f"  prl dashboard {shlex.quote(str(output_dir))}")
    return lines


def _taskset(run_dir: Path) -> str:
    """The taskset id of the run's first source (train, else eval), for ``prl eval``."""
    resolved = run_dir / "configs" / "latest" / "resolved" / "envs"
    for split in ("train", "eval"):
        for path in sorted((resolved / split).glob("*.json")):
            taskset = ((_load(path).get("env") or {}).get("taskset")) or {}
            if isinstance(taskset, dict) and taskset.get("id"):
                return str(taskset["id"])
    return "<taskset>"


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def print_lines(lines: list[str]) -> None:
    print("\n".join(lines), flush=True)


def run_reported(
    entry: str, run_dir: Path, log_dir: Path, logs: dict[str, Path], run: Callable[[], int], in_process: bool = False
) -> int:
    """``run()`` between the start lines and the end summary; returns its exit code.
    ``in_process``: ``logs`` names what runs inside this process (blamed when it fails).
    A usage error (a ConfigError, or exit code 2 from a child) was already said in one line,
    which a summary would only bury."""
    from prl.config.errors import ConfigError

    print_lines(start_lines(run_dir, log_dir, logs))
    started = time.monotonic()
    code: int | None = 1
    try:
        code = run()
        return code
    except KeyboardInterrupt:
        code = 130
        raise
    except ConfigError:
        code = None
        raise
    finally:
        if code is not None and code != USAGE_EXIT:
            outcome = Outcome(entry, run_dir, log_dir, code, time.monotonic() - started, logs if in_process else {})
            print_lines(end_lines(outcome))
