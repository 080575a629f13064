"""Run directories: names, attempts, resolved configs, the reuse/clean/resume rules.

Layout (``docs/runs.md``)::

    <output_dir>/<run.dir>/configs/attempt_N/{command.txt,<entry>.toml,resolved/*.json}
    <output_dir>/<run.dir>/logs/attempt_N/
    configs/latest -> attempt_N, logs/latest -> attempt_N   (relative, replaced atomically)

Checkpoint steps, completion markers and resume lookup are :mod:`prl.layout`'s; this module
checks a resume target before launching and applies ``--clean``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from prl import layout
from prl.config.errors import ConfigError

NOT_ARTIFACTS = {"configs", "launcher"}


@dataclass
class RunPaths:
    run_dir: Path
    attempt: int
    config_dir: Path
    log_dir: Path

    @property
    def resolved_dir(self) -> Path:
        return self.config_dir / "resolved"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._+-]+", "-", text.lower()).strip("-") or "x"


def generate_name(parts: list[str], model: str) -> str:
    model_part = slug(Path(model.rstrip("/")).name or model)
    envs = "+".join(slug(p) for p in parts) if parts else "no-env"
    return f"{envs}--{model_part}--{secrets.token_hex(4)}"


def run_dir_of(output_dir: Path, run_name: str, run_subdir: str | None) -> Path:
    out = Path(output_dir).resolve()
    path = (out / (run_subdir or run_name)).resolve()
    if out != path and out not in path.parents:
        raise ConfigError(f"--run.dir/--run.name '{run_subdir or run_name}' escapes output_dir {out}")
    if path == out:
        raise ConfigError("--run.name must name a directory inside output_dir")
    return path


def has_artifacts(run_dir: Path) -> bool:
    if not run_dir.exists():
        return False
    for child in run_dir.iterdir():
        if child.name in NOT_ARTIFACTS:
            continue
        if child.name == "logs" and child.is_dir() and not any(_real_entries(child)):
            continue
        return True
    return False


def _real_entries(logs: Path):
    for attempt in logs.iterdir():
        if attempt.is_symlink():
            continue
        if attempt.is_dir() and not any(attempt.rglob("*")):
            continue
        yield attempt


def next_attempt(run_dir: Path) -> int:
    best = 0
    for sub in ("configs", "logs"):
        base = run_dir / sub
        if base.is_dir():
            for child in base.iterdir():
                m = re.fullmatch(r"attempt_(\d+)", child.name)
                if m and not child.is_symlink():
                    best = max(best, int(m.group(1)))
    return best + 1


def check_resume(run_dir: Path, resume: Any, components: tuple[str, ...], ckpt: Any = None) -> int | None:
    """The step a resume starts from (None when not resuming or forking); errors name the flag."""
    return layout.resume_step(resume, layout.checkpoint_root(ckpt, run_dir), components)


def clean_run_dir(run_dir: Path, output_dir: Path, resume_step: int | None, ckpt: Any = None) -> None:
    """``--clean``: delete the run (or, with --resume, what lies after the resume step)."""
    if os.environ.get("NEVER_CLEAN"):
        return
    out = Path(output_dir).resolve()
    if out not in run_dir.resolve().parents:
        raise ConfigError(f"--clean refuses to delete {run_dir}: it is outside output_dir {out}")
    if not run_dir.exists():
        return
    if resume_step is None:
        shutil.rmtree(run_dir)
        return
    layout.clean_after(run_dir, layout.checkpoint_root(ckpt, run_dir), resume_step)


def _entry_ckpt(entry: str, resolved: dict[str, BaseModel | dict]) -> Any:
    """The ``[ckpt]`` section of the resolved config that saves this entry's checkpoints."""
    model = resolved.get("trainer" if entry == "rl" else entry)
    return getattr(model, "ckpt", None)


def current_attempt() -> int | None:
    """The attempt number N of this launch (``$PRL_ATTEMPT_CONFIG_DIR`` ends in
    ``attempt_N``), for processes a launcher started; None otherwise."""
    m = re.fullmatch(r"attempt_(\d+)", Path(os.environ.get("PRL_ATTEMPT_CONFIG_DIR", "")).name)
    return int(m.group(1)) if m else None


def _symlink_latest(base: Path, attempt: int) -> None:
    tmp = base / f".latest.{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(f"attempt_{attempt}")
    os.replace(tmp, base / "latest")


def prepare_run(
    entry: str,
    argv: list[str],
    root_files: list[str],
    run_dir: Path,
    output_dir: Path,
    resolved: dict[str, BaseModel | dict],
    clean: bool = False,
    resume: Any = None,
    rl: bool = False,
) -> RunPaths:
    """Create the run directory and write this attempt's configs."""
    components = layout.COMPONENTS.get(entry) or layout.COMPONENTS["rl" if rl else "sft"]
    ckpt = _entry_ckpt(entry, resolved)
    resume_step = check_resume(run_dir, resume, components, ckpt) if resume is not None else None
    if clean:
        clean_run_dir(run_dir, output_dir, resume_step, ckpt)
    forking = resume is not None and resume.dir is not None
    if (resume is None or forking) and has_artifacts(run_dir):
        raise ConfigError(
            f"Run directory {run_dir} already holds artifacts; pass --resume to continue it, "
            "--clean to start over, or choose another --run.name"
        )
    attempt = next_attempt(run_dir)
    paths = RunPaths(
        run_dir, attempt, run_dir / "configs" / f"attempt_{attempt}", run_dir / "logs" / f"attempt_{attempt}"
    )
    paths.resolved_dir.mkdir(parents=True, exist_ok=True)
    paths.log_dir.mkdir(parents=True, exist_ok=True)
    _write_command(paths.config_dir / "command.txt", entry, argv)
    if root_files:
        body = "".join(f"# @ {f}\n{Path(f).read_text()}\n" for f in root_files)
        (paths.config_dir / f"{entry}.toml").write_text(body)
    for name, model in resolved.items():
        target = paths.resolved_dir / f"{name}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        data = model.model_dump(mode="json") if isinstance(model, BaseModel) else model
        target.write_text(json.dumps(absolute_model_paths(data), indent=2) + "\n")
    _symlink_latest(run_dir / "configs", attempt)
    _symlink_latest(run_dir / "logs", attempt)
    return paths


MODEL_SECTIONS = ("model", "tokenizer")


def _local_path(name: str) -> bool:
    """A model name that is a local path: an existing one, or one written as a path
    (``/``, ``.`` or ``~`` first). Anything else (``Qwen/Qwen3-0.6B``) is a hub id."""
    return bool(name) and (name.startswith(("/", ".", "~")) or Path(name).exists())


def absolute_model_paths(data: Any) -> Any:
    """``data`` with every ``model.name``/``tokenizer.name`` that is a local path made
    absolute, at any depth. A resolved config is read from other directories (the
    dashboard, a SLURM job, a resumed run started elsewhere), where a relative path names
    nothing; hub ids are left as written."""
    if isinstance(data, list):
        return [absolute_model_paths(v) for v in data]
    if not isinstance(data, dict):
        return data
    out = {k: absolute_model_paths(v) for k, v in data.items()}
    for key in MODEL_SECTIONS:
        section = out.get(key)
        if isinstance(section, dict) and isinstance(section.get("name"), str) and _local_path(section["name"]):
            section["name"] = os.path.abspath(os.path.expanduser(section["name"]))
    return out


def _write_command(path: Path, entry: str, argv: list[str]) -> None:
    if path.exists():  # first writer wins (SLURM array members share an attempt)
        return
    path.write_text(shlex.join(["prl", entry, *argv]) + "\n")
