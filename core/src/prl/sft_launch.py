"""The process plan of ``prl sft`` with ``[eval]``: which children to start, with which argv.

Without ``[eval]`` ``prl sft`` trains in its own process. With it, the launcher plugin
(``[deployment]``) starts and supervises, each child reading one resolved JSON::

    inference    python -m prl inference   @ <attempt>/resolved/inference.json  (only with [inference])
    online-eval  python -m prl online-eval @ <attempt>/resolved/sft.json      -> logs/attempt_N/eval.log
    trainer      python -m prl sft-trainer @ <attempt>/resolved/sft.json      (torchrun inside when num_workers > 1)

Env servers of the eval sources are spawned by the online-eval process, as the orchestrator
spawns its own. Inference is a service (started and ready first); the run succeeds when the
trainer and the online-eval process have both exited 0, the latter after the final step's
evaluation.

Scratch: ``broadcasts/`` is cleared as for ``prl rl`` (all of it for a fresh run; from the
resume step on otherwise: the trainer broadcasts it again at start), and so is the plan of
an earlier attempt (:mod:`prl.evalplan`), which would tell the online-eval process the wrong
versions.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from prl import layout
from prl.contracts.launcher import ProcessSpec
from prl.evalplan import clear_plan
from prl.hub import READ_CACHE_ENV
from prl.rl_launch import child_env, inference_process

if TYPE_CHECKING:
    from prl.config.roots import SFTConfig


def _resume_step(config: SFTConfig, run_dir: Path) -> int | None:
    if config.resume is None:
        return None
    root = layout.checkpoint_root(config.ckpt, run_dir)
    return layout.resume_step(config.resume, root, layout.COMPONENTS["sft"])


def build_processes(
    config: SFTConfig, run_dir: Path, attempt_config_dir: Path, attempt_log_dir: Path, clear_scratch: bool = True
) -> list[ProcessSpec]:
    """The children of one ``prl sft`` attempt, services first: with online eval as above;
    without it only the trainer (for a launcher that submits jobs, ``LauncherConfig.submits``).
    A dry run (``clear_scratch=False``) leaves the run's scratch as it is."""
    run_dir, logs = Path(run_dir), Path(attempt_log_dir)
    resolved = Path(attempt_config_dir) / "resolved"
    if clear_scratch:
        layout.clear_scratch(run_dir, _resume_step(config, run_dir))
        clear_plan(run_dir)
    common = child_env(config, run_dir, attempt_config_dir, attempt_log_dir)
    out: list[ProcessSpec] = []
    if config.inference is not None:
        out.append(inference_process(config.inference, resolved, logs, common))
    sft_json = str(resolved / "sft.json")
    if config.eval is not None:
        evaluator = [sys.executable, "-m", "prl", "online-eval", "@", sft_json]
        out.append(ProcessSpec("online-eval", evaluator, logs / "eval.log", dict(common), role="eval"))
    trainer = [sys.executable, "-m", "prl", "sft-trainer", "@", sft_json]
    trainer_env = {**common, **READ_CACHE_ENV}  # the hub cache prl sft filled: no request per file
    out.append(ProcessSpec("trainer", trainer, logs / "trainer.log", trainer_env, role="trainer"))
    return out
