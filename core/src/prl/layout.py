"""The run layout: step directories, completion markers, retention and resume lookup.

Every rule about ``checkpoints/step_N/`` and the ``batches/`` / ``broadcasts/`` scratch
directories (``docs/checkpoints.md``) lives here; the launcher, the
orchestrator, ``prl eval`` and trainer plugins all call it::

    <root>/step_<N>/<component>/...          root: ckpt.output_dir, else <run_dir>/checkpoints
    <root>/step_<N>/<component>/COMPLETE     written last, once the component's files are durable

Components are ``trainer``, ``orchestrator`` and ``evals``. A step is *complete* for an
entry point when every component it needs (:data:`COMPONENTS`) has its marker: ``rl``
needs the trainer and the orchestrator, ``sft`` the trainer, ``eval`` its cursor. Core
reads only the markers, never a component's own files, so a trainer plugin may store its
part in any format.

A writer calls :func:`begin` before writing its part (a marker left by an earlier attempt
would otherwise vouch for files being rewritten) and :func:`mark_complete` after.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from prl.config.errors import ConfigError
from prl.fsutil import write_atomic

TRAINER, ORCHESTRATOR, EVALS = "trainer", "orchestrator", "evals"
COMPONENTS: dict[str, tuple[str, ...]] = {
    "rl": (TRAINER, ORCHESTRATOR),
    "sft": (TRAINER,),
    "eval": (EVALS,),
}
"""The components whose markers make a step complete, per entry point."""
MARKER = "COMPLETE"
SCRATCH = ("batches", "broadcasts")
_STEP = re.compile(r"step_(\d+)")


class CheckpointNotFound(ConfigError, FileNotFoundError):
    """A resume target that is missing or incomplete. A usage error (the CLI prints it and
    exits 2) that is also a FileNotFoundError for code that runs without the CLI."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "Resume error")


# ---- names ---------------------------------------------------------------------------
def step_name(step: int) -> str:
    return f"step_{step}"


def parse_step(name: str) -> int | None:
    """N for a directory named ``step_N``, else None."""
    m = _STEP.fullmatch(name)
    return int(m.group(1)) if m else None


def step_dir(root: str | os.PathLike, step: int) -> Path:
    return Path(root) / step_name(step)


def checkpoint_root(ckpt: Any, run_dir: str | os.PathLike) -> Path:
    """Where ``step_N`` directories live: ``ckpt.output_dir`` when set, else the run's."""
    out = getattr(ckpt, "output_dir", None) if ckpt is not None else None
    return Path(out) if out else Path(run_dir) / "checkpoints"


def component_dir(step_path: str | os.PathLike, component: str) -> Path:
    return Path(step_path) / component


def step_dirs(base: str | os.PathLike) -> dict[int, Path]:
    """Every ``step_N`` directory under ``base``, by ascending N."""
    base = Path(base)
    if not base.is_dir():
        return {}
    found = {n: p for p in base.iterdir() if (n := parse_step(p.name)) is not None and p.is_dir()}
    return dict(sorted(found.items()))


# ---- markers -------------------------------------------------------------------------
def _fsync_dir(path: Path) -> None:
    # A rename or unlink is durable only once its directory is; not every OS can open one.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def begin(step_path: str | os.PathLike, component: str) -> Path:
    """Prepare ``step_N/<component>/`` for writing and return it.

    Drops the marker of an earlier attempt that saved the same step, so a crash while the
    files are rewritten leaves the step incomplete rather than half old, half new.
    """
    path = component_dir(step_path, component)
    path.mkdir(parents=True, exist_ok=True)
    marker = path / MARKER
    if marker.exists():
        marker.unlink()
        _fsync_dir(path)
    return path


def mark_complete(step_path: str | os.PathLike, component: str) -> Path:
    """Declare ``step_N/<component>/`` complete. Call it last, after the files are durable."""
    path = component_dir(step_path, component)
    body = json.dumps({"component": component, "time": time.time()})
    marker = write_atomic(path / MARKER, body, fsync=True)
    _fsync_dir(path)
    return marker


def missing(step_path: str | os.PathLike, components: tuple[str, ...]) -> list[str]:
    """The components of ``components`` that have not marked ``step_path`` complete."""
    return [c for c in components if not (component_dir(step_path, c) / MARKER).is_file()]


def is_complete(step_path: str | os.PathLike, components: tuple[str, ...]) -> bool:
    return not missing(step_path, components)


def complete_steps(root: str | os.PathLike, components: tuple[str, ...]) -> list[int]:
    """Steps under ``root`` that every one of ``components`` marked complete, ascending."""
    return [n for n, p in step_dirs(root).items() if is_complete(p, components)]


def latest_complete(root: str | os.PathLike, components: tuple[str, ...]) -> int | None:
    steps = complete_steps(root, components)
    return steps[-1] if steps else None


# ---- saving and retention ------------------------------------------------------------
def save_due(ckpt: Any, step: int, final: bool) -> bool:
    """Whether ``step`` is saved: every multiple of ``ckpt.interval``, and always the final
    step (an interval of None means the final step only). Nothing without ``[ckpt]``."""
    if ckpt is None:
        return False
    if final:
        return True
    return ckpt.interval is not None and step % ckpt.interval == 0


def retain(root: str | os.PathLike, ckpt: Any, components: tuple[str, ...], upto: int | None = None) -> list[int]:
    """Delete the step directories ``ckpt.keep_last`` / ``ckpt.keep_interval`` do not keep.

    Kept: the newest ``keep_last`` complete steps, every multiple of ``keep_interval``, and
    always the newest complete step (what ``--resume`` loads: with ``keep_interval`` alone it
    would otherwise be deleted right after it was saved). Never touched: steps after
    ``upto`` (the step just saved) and incomplete steps newer than the newest complete one,
    since another component may still be writing them (the orchestrator saves step N before
    the trainer does) or an earlier attempt left them past a resume point. With both fields
    None nothing is deleted. Returns the deleted steps.
    """
    if ckpt is None or (ckpt.keep_last is None and ckpt.keep_interval is None):
        return []
    dirs = {n: p for n, p in step_dirs(root).items() if upto is None or n <= upto}
    complete = [n for n, p in dirs.items() if is_complete(p, components)]
    keep = set(complete[-ckpt.keep_last :]) if ckpt.keep_last else set()
    if ckpt.keep_interval:
        keep |= {n for n in dirs if n % ckpt.keep_interval == 0}
    newest = complete[-1] if complete else -1
    keep |= {n for n in dirs if n >= newest}
    gone = [n for n in dirs if n not in keep]
    for n in gone:
        shutil.rmtree(dirs[n], ignore_errors=True)
    return gone


# ---- resume --------------------------------------------------------------------------
def _needs(components: tuple[str, ...]) -> str:
    return " and ".join(f"{c}/{MARKER}" for c in components)


def find_resume(
    resume: Any, root: str | os.PathLike, complete_for: tuple[str, ...], reads: tuple[str, ...] | None = None
) -> Path | None:
    """The ``step_N`` directory a resume loads from; None when not resuming.

    ``--resume`` alone takes the newest step complete for ``complete_for`` (all of the run's
    components, so every process picks the same step); ``--resume.step`` and
    ``--resume.dir`` must be complete for ``reads``, the parts the caller loads (default:
    ``complete_for``). Errors name the flag.
    """
    if resume is None:
        return None
    root, reads = Path(root), complete_for if reads is None else reads
    if resume.dir is not None:
        return _resume_dir(Path(resume.dir), reads)
    if resume.step is not None:
        path = step_dir(root, resume.step)
        lacking = missing(path, reads)
        if lacking:
            why = "it does not exist" if not path.is_dir() else f"no {_needs(tuple(lacking))}"
            raise CheckpointNotFound(
                f"--resume.step: no complete checkpoint for step {resume.step} in {root} ({path.name}: {why})"
            )
        return path
    latest = latest_complete(root, complete_for)
    if latest is None:
        need = _needs(complete_for)
        raise CheckpointNotFound(f"--resume: no complete checkpoint found in {root} (a complete step has {need})")
    return step_dir(root, latest)


def _resume_dir(path: Path, reads: tuple[str, ...]) -> Path:
    if parse_step(path.name) is None:
        raise CheckpointNotFound(f"--resume.dir must end in step_<digits>, got {path}")
    if not path.is_dir():
        raise CheckpointNotFound(f"--resume.dir: checkpoint directory not found: {path}")
    lacking = missing(path, reads)
    if lacking:
        raise CheckpointNotFound(f"--resume.dir: {path} is not a complete checkpoint (no {_needs(tuple(lacking))})")
    return path


def resume_step(resume: Any, root: str | os.PathLike, components: tuple[str, ...]) -> int | None:
    """The step of this run a launch resumes from: None for a fresh run or a fork
    (``--resume.dir``), which is still checked. Errors name the flag."""
    path = find_resume(resume, root, components)
    if path is None or resume.dir is not None:
        return None
    return parse_step(path.name)


# ---- cleaning ------------------------------------------------------------------------
def remove_steps_after(base: str | os.PathLike, step: int) -> list[int]:
    """Delete every ``step_N`` directory under ``base`` with N > ``step``."""
    gone = [n for n in step_dirs(base) if n > step]
    for n in gone:
        shutil.rmtree(step_dir(base, n), ignore_errors=True)
    return gone


def clean_after(run_dir: str | os.PathLike, ckpt_root: str | os.PathLike, step: int) -> None:
    """``--clean`` with a resume: drop checkpoints and scratch of steps after ``step``."""
    remove_steps_after(ckpt_root, step)
    for sub in SCRATCH:
        remove_steps_after(Path(run_dir) / sub, step)


def clear_scratch(run_dir: str | os.PathLike, step: int | None) -> None:
    """Clear ``batches/`` and ``broadcasts/`` before an RL launch.

    A fresh run (``step`` None) starts with neither. A resume from step N keeps batches up
    to N and broadcasts before N: the trainer re-broadcasts version N at start, and the
    handshake markers of an earlier attempt would fake its acknowledgement.
    """
    run_dir = Path(run_dir)
    if step is None:
        for sub in SCRATCH:
            shutil.rmtree(run_dir / sub, ignore_errors=True)
        return
    remove_steps_after(run_dir / "batches", step)
    remove_steps_after(run_dir / "broadcasts", step - 1)
