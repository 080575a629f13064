"""What the machine can do to ``prl rl``: an unwritable output_dir, an inference port
already taken, a disk that fills up while a checkpoint is written. Each ends the run with
one clear line and exit code 2, and a checkpoint that could not be written in full is never
taken for a complete one. Real processes, real sockets, real (tmpfs) filesystems."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_launcher_local")
pytest.importorskip("prl_tasks_builtin")
pytest.importorskip("prl_trainer_torch")

from prl import layout  # noqa: E402
from prl.serving import free_port  # noqa: E402
from prl.testing.configs import tiny_rl_toml  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from prl_model_init.build import make_model

    return make_model(tmp_path_factory.mktemp("model") / "tiny", preset="tiny")


def _toml(tmp_path: Path, model: Path, output_dir: Path, port: int, ckpt: dict | None = None) -> Path:
    """A one-step tiny run checkpointing every step, with ``ckpt``'s settings added."""
    overrides = {"max_steps": 1, "output_dir": str(output_dir), "trainer": None}
    ckpt = {"interval": 1, **(ckpt or {})}
    return tiny_rl_toml(tmp_path, model, overrides, {"inference": {"server": {"port": port}}, "ckpt": ckpt})


def _prl_rl(toml: Path, *extra: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "prl", "rl", "@", str(toml), "--run.name", "r", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The run's single error line; no traceback anywhere on its console."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.startswith("prl") or "error" in line.lower()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def _can_mount() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("mount") is not None


@contextlib.contextmanager
def _tmpfs(path: Path, size: str, *opts: str):
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *opts]), "tmpfs", str(path)])
    if done.returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _remount(path: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)


def test_an_unwritable_output_dir_is_one_line_before_anything_starts(tmp_path, model):
    if _can_mount():
        ctx = _tmpfs(tmp_path / "ro", "1m", "ro")
    else:  # without root, a directory we may not write to
        (tmp_path / "ro").mkdir()
        (tmp_path / "ro").chmod(0o500)
        ctx = contextlib.nullcontext(tmp_path / "ro")
    with ctx as out:
        proc = _prl_rl(_toml(tmp_path, model, out, free_port("127.0.0.1")))
    line = _one_error_line(proc)
    assert line.startswith(f"Environment error: cannot write the run directory {out}/r: "), line
    assert "set output_dir (or $PRL_OUTPUT_DIR) to a writable directory" in line
    assert not (tmp_path / "ro" / "r").exists()


def test_an_inference_port_already_in_use_is_one_line(tmp_path, model):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        proc = _prl_rl(_toml(tmp_path, model, tmp_path / "outputs", port))
    line = _one_error_line(proc)
    assert line == (
        f"Environment error: --inference.server.port {port}: port {port} on 127.0.0.1 is already in use; "
        "stop the process that holds it or choose another port (--inference.server.port 0 picks a free one)"
    )
    # Said before anything started: no process was launched, not even inference.
    logs = tmp_path / "outputs" / "r" / "logs" / "attempt_1"
    assert not (logs / "inference.log").exists() and not (logs / "trainer.log").exists()


@pytest.mark.slow
def test_a_full_disk_while_checkpointing_is_one_line_and_resume_takes_the_previous_step(tmp_path, model):
    if not _can_mount():
        pytest.skip("needs root to mount a size-limited tmpfs")
    with _tmpfs(tmp_path / "ckpt", "256m") as ckpt_dir:
        toml = _toml(tmp_path, model, tmp_path / "outputs", free_port("127.0.0.1"), {"output_dir": str(ckpt_dir)})
        first = _prl_rl(toml)  # one step: measures what a checkpoint takes
        assert first.returncode == 0, first.stderr[-3000:]
        size = sum(f.stat().st_size for f in (ckpt_dir / "step_1").rglob("*") if f.is_file())
        used = shutil.disk_usage(ckpt_dir).used
        _remount(ckpt_dir, used + size // 2)  # room for half of step 2's checkpoint

        full = _prl_rl(toml, "--resume", "--max-steps", "3")
        line = _one_error_line(full)
        assert "Environment error: writing checkpoint" in line and "step_2" in line, line
        assert "no space left on device" in line.lower(), line
        rl = layout.COMPONENTS["rl"]
        assert not layout.is_complete(ckpt_dir / "step_2", rl)
        assert not (ckpt_dir / "step_2" / "trainer" / layout.MARKER).exists()
        assert layout.latest_complete(ckpt_dir, rl) == 1

        _remount(ckpt_dir, 256 << 20)
        again = _prl_rl(toml, "--resume", "--max-steps", "3")
        assert again.returncode == 0, again.stderr[-3000:]
        assert "[trainer] Step 2 |" in again.stdout and "[trainer] Step 1 |" not in again.stdout
        assert layout.latest_complete(ckpt_dir, rl) == 3
