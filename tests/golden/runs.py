"""Golden learning curves: one short CPU run per algorithm whose learning signal must move.

Each entry of ``RUNS`` is a complete ``prl rl`` run on a built-in taskset (reverse-text,
one word) with the tiny model made here from a fixed seed, ``orchestrator.deterministic =
true`` and one trainer thread, so a run repeats itself on one machine and stays close on
another. A run takes about 90 s on two (shared) CPU cores. Its curve is, per step, each
``signals`` metric: orchestrator metrics from the orchestrator's rows of ``metrics.jsonl``,
the ones in ``trainer_signals`` from the trainer's.

Two checks use a curve (``tests/golden/test_golden.py``, marked ``slow``):

* learning: for every signal with a margin, the mean of the last ``WINDOW`` steps minus the
  mean of the first ``WINDOW`` steps reaches it (a positive margin is a least rise, a
  negative one a least fall);
* golden: the new curve's ``WINDOW``-step window means stay within the metric's
  ``tolerance`` of the recorded curve's, so a change that breaks or silently weakens
  learning fails, not only one that breaks shapes.

What two CPU minutes of RL do to the random tiny model is modest: the policy moves
decisively (entropy about 5.7 -> 2) while the reward rises only a little (about 0.08 ->
0.10). The margin is therefore on the entropy, and the reward curve is held to its
recording. Multi-agent learning needs a policy that sometimes makes a legal move, which
takes minutes of supervised warm start on these CPUs: it has its own slow test,
``test_multi_agent.py`` (rae on kuhn-poker).

Re-record after an intended change of learning behaviour (and commit the JSON files)::

    .venv/bin/python tests/golden/record.py            # every algorithm
    .venv/bin/python tests/golden/record.py rae echo   # some

Adding an algorithm (opd, opsd, sft, ...): add a ``GoldenRun`` to ``RUNS`` with its
``algo`` table, ``extra`` TOML for anything else it needs (a frozen teacher's or sampling
source's table; the server itself can be started by ``prepare``, which gets the model
directory), and the metrics that show its learning as ``signals`` with margins, e.g.
``signals={"loss/ref_kl/mean": -0.01}, trainer_signals=("loss/ref_kl/mean",),
tolerance={"loss/ref_kl/mean": 0.05}`` for a KL that must fall. Then record its curve with
the command above; ``test_golden.py`` parametrises over ``RUNS`` by itself.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CURVES = Path(__file__).parent / "curves"
WINDOW = 5
REVERSE = 'id = "reverse-text"\nmax_words = 1'
RL_SIGNALS: dict[str, float | None] = {"entropy/all/mean": -1.0, "reward/all/mean": None}
RL_TOLERANCE = {"entropy/all/mean": 0.6, "reward/all/mean": 0.04}


@dataclass
class GoldenRun:
    """One algorithm's golden run."""

    algo: str
    """TOML body of ``[orchestrator.train.algo]`` (``type = ...`` and its fields)."""
    taskset: str = REVERSE
    """TOML body of the source's ``env.taskset`` table."""
    signals: dict[str, float | None] = field(default_factory=lambda: dict(RL_SIGNALS))
    """metric -> margin on last-window minus first-window mean (None: compared only)."""
    tolerance: dict[str, float] = field(default_factory=lambda: dict(RL_TOLERANCE))
    """metric -> largest allowed gap between the new and the recorded window means."""
    trainer_signals: tuple[str, ...] = ("entropy/all/mean",)
    """Signals read from the trainer's rows instead of the orchestrator's."""
    steps: int = 30
    group_size: int = 8
    batch_size: int = 16
    max_tokens: int = 8
    lr: float = 5e-3
    extra: str = ""
    """More TOML appended to the run's config."""
    prepare: Callable[[Path], None] | None = None
    """Runs on the fresh model directory before training (a warm start, a frozen server)."""
    seed: int = 0


RUNS: dict[str, GoldenRun] = {
    "grpo": GoldenRun('type = "grpo"'),
    "max_rl": GoldenRun('type = "max_rl"'),
    "echo": GoldenRun('type = "echo"\nroles = { user = { alpha = 0.1 } }'),
    "debug": GoldenRun('type = "debug"'),
    # single-agent here: rae's per-agent baseline is then one running baseline of the reward,
    # and hierarchical_grpo's (no agent of an episode role) the group mean
    "rae": GoldenRun('type = "rae"'),
    "hierarchical_grpo": GoldenRun('type = "hierarchical_grpo"\nepisode_agents = ["solver"]'),
}


def config_toml(run: GoldenRun, model: Path, out: Path) -> str:
    return textwrap.dedent(f'''
        max_steps = {run.steps}
        seq_len = 512
        output_dir = "{out}"
        env_vars = {{ OMP_NUM_THREADS = "1" }}
        [model]
        name = "{model}"
        [orchestrator]
        batch_size = {run.batch_size}
        deterministic = true
        seed = {run.seed}
        [orchestrator.train]
        group_size = {run.group_size}
        [orchestrator.train.sampling]
        max_completion_tokens = {run.max_tokens}
        [trainer.optim]
        lr = {run.lr}
        [inference.server]
        port = 0
        [orchestrator.train.algo]
    ''') + run.algo + textwrap.dedent('''
        [[orchestrator.train.source]]
        name = "golden"
        [orchestrator.train.source.env.taskset]
    ''') + run.taskset + "\n" + run.extra + "\n"  # fmt: skip


def base_model(run: GoldenRun, cache: Path) -> Path:
    """The run's starting model: the tiny model of its seed, warm-started by ``prepare``;
    built once per ``cache`` directory and shared by the runs that start alike."""
    from prl_model_init.build import make_model

    key = f"seed{run.seed}-{run.prepare.__name__ if run.prepare else 'random'}"
    target = cache / key
    if not target.exists():
        building = cache / f"{key}.building"
        shutil.rmtree(building, ignore_errors=True)
        make_model(building, preset="tiny", seed=run.seed)
        if run.prepare is not None:
            run.prepare(building)
        building.rename(target)
    return target


def execute(name: str, workdir: Path, cache: Path | None = None) -> dict[str, list[float]]:
    """Run ``RUNS[name]`` under ``workdir``; the per-step curve of each signal."""
    from prl.cli.commands import cmd_rl

    run = RUNS[name]
    model = workdir / "model"
    shutil.copytree(base_model(run, cache or workdir / "cache"), model)
    toml = workdir / "golden.toml"
    toml.write_text(config_toml(run, model, workdir / "outputs"))
    code = cmd_rl(["@", str(toml), "--run.name", name])
    if code != 0:
        raise RuntimeError(f"prl rl for golden run '{name}' exited {code}")
    return read_curve(workdir / "outputs" / name, run)


def read_curve(run_dir: Path, run: GoldenRun) -> dict[str, list[float]]:
    rows = [json.loads(x) for x in (run_dir / "monitors" / "file" / "metrics.jsonl").read_text().splitlines()]
    curve: dict[str, list[float]] = {}
    for signal in run.signals:
        producer = "trainer" if signal in run.trainer_signals else "orch"
        by_step = {r["step"]: r[signal] for r in rows if r.get("producer") == producer and signal in r}
        curve[signal] = [by_step[s] for s in sorted(by_step)]
    return curve


def windows(values: list[float]) -> list[float]:
    """Means of consecutive ``WINDOW``-step blocks (a last partial block is dropped)."""
    return [sum(values[i : i + WINDOW]) / WINDOW for i in range(0, len(values) - WINDOW + 1, WINDOW)]


def learned(values: list[float]) -> float:
    """Last-window mean minus first-window mean."""
    return sum(values[-WINDOW:]) / WINDOW - sum(values[:WINDOW]) / WINDOW


def passes(moved: float, margin: float | None) -> bool:
    """A positive margin is a least rise, a negative one a least fall; None always passes."""
    if margin is None:
        return True
    return moved >= margin if margin > 0 else moved <= margin


def curve_path(name: str) -> Path:
    return CURVES / f"{name}.json"
