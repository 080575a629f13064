"""The process plan of ``prl rl``: which children to start, with which argv, env and logs.

Every child re-parses one resolved JSON config written by the run-directory code::

    inference     python -m prl inference    @ <attempt>/resolved/inference.json
    orchestrator  python -m prl orchestrator @ <attempt>/resolved/orchestrator.json
    trainer       python -m prl trainer      @ <attempt>/resolved/trainer.json
                  (python -m torch.distributed.run --nproc-per-node N -m prl trainer ... when
                  trainer.num_workers > 1)

Env servers are not in the plan: :class:`prl.envs.EnvSource` (inside the orchestrator)
spawns ``prl env-server`` for the sources that need one and supervises it.

The inference child is a *server*: it gets a ``ready_file`` (and ``$PRL_READY_FILE``) where
it writes its base URL once serving, and ``$PRL_HEALTH_URL`` tells the launcher where to
poll ``/health``. Launchers start servers first and the rest once servers are ready; the
run ends when every non-server child has exited.

:func:`prepare_scratch` clears ``batches/`` and ``broadcasts/`` at launch: all of it for a
fresh run; on resume from step N, batches after N and broadcasts from N on (the trainer
re-broadcasts version N at start, and markers of an earlier attempt would fake its
handshake).
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from prl.contracts.launcher import ProcessSpec


def _cmd(entry: str, config_file: Path) -> list[str]:
    return [sys.executable, "-m", "prl", entry, "@", str(config_file)]


def _gpu_env(config, role: str) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES from the launcher's GPU counts: inference first, then trainer."""
    deployment = config.deployment
    n_infer = int(getattr(deployment, "num_infer_gpus", 0) or 0)
    n_train = int(getattr(deployment, "num_train_gpus", 0) or 0)
    if not (n_infer or n_train):
        return {}
    ids = range(n_infer) if role == "inference" else range(n_infer, n_infer + n_train)
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, ids))}


def resume_step(config, run_dir: Path) -> int | None:
    """Step this launch resumes from in ``run_dir`` (None for a fresh run or a fork)."""
    from prl.runs import check_resume

    if config.resume is None or config.resume.dir is not None:
        return None
    return check_resume(run_dir, config.resume, rl=True)


def prepare_scratch(run_dir: Path, step: int | None) -> None:
    """Clear ``batches/`` and ``broadcasts/`` for a launch (see the module docstring)."""
    for sub, first_removed in (("batches", None if step is None else step + 1), ("broadcasts", step)):
        base = Path(run_dir) / sub
        if not base.is_dir():
            continue
        if first_removed is None:
            shutil.rmtree(base)
            continue
        for child in base.iterdir():
            m = re.fullmatch(r"step_(\d+)", child.name)
            if m and int(m.group(1)) >= first_removed:
                shutil.rmtree(child, ignore_errors=True)


def build_processes(config, run_dir: Path, attempt_config_dir: Path, attempt_log_dir: Path) -> list[ProcessSpec]:
    """The children of one ``prl rl`` attempt, servers first; clears scratch directories."""
    run_dir, resolved, logs = Path(run_dir), Path(attempt_config_dir) / "resolved", Path(attempt_log_dir)
    prepare_scratch(run_dir, resume_step(config, run_dir))
    name = config.run.name or run_dir.name
    common = {
        **{k: str(v) for k, v in config.env_vars.items()},
        "PRL_RUN_NAME": name,
        "PRL_RUN_ID": name,
        "PRL_ATTEMPT_CONFIG_DIR": str(attempt_config_dir),
        "PRL_ATTEMPT_LOG_DIR": str(attempt_log_dir),
        "PYTHONUNBUFFERED": "1",
    }
    out: list[ProcessSpec] = []
    if config.inference is not None:
        ready = resolved / "inference.address"
        server = config.inference.server
        env = {**common, **_gpu_env(config, "inference"), "PRL_READY_FILE": str(ready)}
        if server.port:
            env["PRL_HEALTH_URL"] = f"http://{server.host}:{server.port}"
        argv = _cmd("inference", resolved / "inference.json")
        out.append(ProcessSpec("inference", argv, logs / "inference.log", env, ready))
    orchestrator = _cmd("orchestrator", resolved / "orchestrator.json")
    out.append(ProcessSpec("orchestrator", orchestrator, logs / "orchestrator.log", dict(common)))
    trainer_env = {**common, **_gpu_env(config, "trainer")}
    out.append(ProcessSpec("trainer", _trainer_argv(config, resolved, logs), logs / "trainer.log", trainer_env))
    return out


def _trainer_argv(config, resolved: Path, logs: Path) -> list[str]:
    workers = config.trainer.num_workers
    if workers <= 1:
        return _cmd("trainer", resolved / "trainer.json")
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={workers}",
        f"--log-dir={logs / 'trainer' / 'torchrun'}", "--tee=3",
        "-m", "prl", "trainer", "@", str(resolved / "trainer.json"),
    ]  # fmt: skip
