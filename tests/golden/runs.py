"""Golden learning curves: one short CPU run per algorithm whose learning signal must move.

Each entry of ``RUNS`` is a complete ``prl rl`` run on the built-in reverse-text taskset
with a tiny model made here from a fixed seed (its ``preset``: ``tiny``, or ``tiny-moe``
for ``grpo_moe``), ``orchestrator.deterministic = true`` and one trainer thread, so a run
repeats itself on one machine and stays close on another. Its curve is, per step, each
``signals`` metric: orchestrator metrics from the orchestrator's rows of
``metrics.jsonl``, the ones in ``trainer_signals`` from the trainer's.

Two checks use a curve (``tests/golden/test_golden.py``, marked ``slow``):

* learning: for every signal with a margin, the mean of the run's second half minus the
  mean of its first ``WINDOW`` steps reaches it (a positive margin is a least rise, a
  negative one a least fall);
* golden: the new curve's ``WINDOW``-step window means stay within the metric's
  ``tolerance`` of the recorded curve's, so a change that breaks or silently weakens
  learning fails, not only one that breaks shapes.

The signal is the reward for the RL algorithms, the reverse KL for opd and opsd, the
cross-entropy for sft. From random weights two CPU minutes of RL collapse the entropy but
leave the reward within its noise, so the RL runs start from a brief supervised warm start
(``warmstart.reverse_warm_start``), a policy that is sometimes partly right, as a real run
starts from an instruction-tuned model. opd and sft serve a frozen model (``frozen``) with
``prl inference`` on loopback for the run's length.

Re-record after an intended change of learning behaviour (and commit the JSON files)::

    .venv/bin/python tests/golden/record.py            # every algorithm
    .venv/bin/python tests/golden/record.py rae echo   # some

Adding an algorithm: add a ``GoldenRun`` to ``RUNS`` with its ``algo`` table, ``extra``
TOML for anything else it needs, ``frozen`` for a served teacher or sampler, and the
metrics that show its learning as ``signals`` with margins (see the opd entry); another
model is a ``preset`` (see ``grpo_moe``). Then record its curve with the command above;
``test_golden.py`` parametrises over ``RUNS`` by itself.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from prl.testing.configs import tiny_rl_config, toml_text

CURVES = Path(__file__).parent / "curves"
WINDOW = 5
REVERSE = 'id = "reverse-text"\nmax_words = 1'
RL_SIGNALS: dict[str, float | None] = {"reward/all/mean": 0.03, "entropy/all/mean": None}
RL_TOLERANCE = {"reward/all/mean": 0.07, "entropy/all/mean": 0.6}


@dataclass
class GoldenRun:
    """One algorithm's golden run."""

    algo: str
    """TOML body of ``[orchestrator.train.algo]`` (``type = ...`` and its fields)."""
    taskset: str = REVERSE
    """TOML body of the source's ``env.taskset`` table."""
    signals: dict[str, float | None] = field(default_factory=lambda: dict(RL_SIGNALS))
    """metric -> margin on second-half minus first-window mean (None: compared only)."""
    tolerance: dict[str, float] = field(default_factory=lambda: dict(RL_TOLERANCE))
    """metric -> largest allowed gap between the new and the recorded window means."""
    trainer_signals: tuple[str, ...] = ("entropy/all/mean",)
    """Signals read from the trainer's rows instead of the orchestrator's."""
    steps: int = 30
    group_size: int = 4
    batch_size: int = 16
    max_tokens: int = 8
    lr: float = 2e-3
    extra: str = ""
    """More TOML, merged over the run's config table by table."""
    prepare: Callable[[Path], None] | None = field(default_factory=lambda: _reverse_warm_start)
    """Runs on the fresh model directory before training (a warm start)."""
    frozen: Callable[[Path], Path] | None = None
    """Builds a frozen model (an opd teacher, an sft sampler) in the given directory; the run
    then serves it with ``prl inference`` on loopback for its whole length, and ``{frozen}``
    and ``{url}`` in ``extra`` become its path and base URL."""
    seed: int = 0
    preset: str = "tiny"
    """The ``prl model init`` preset the starting model is made from (``tiny-moe``: the
    Mixture-of-Experts model, whose routers RL leaves frozen by default)."""
    trainer_log: tuple[str, ...] = ()
    """Text the trainer's log must contain (a setting the run is about, seen to be in force)."""


def _reverse_warm_start(model_dir: Path) -> None:
    from warmstart import reverse_warm_start

    reverse_warm_start(model_dir, steps=60)


def _teacher(out: Path) -> Path:
    """opd's teacher: the student's own tiny model at temperature 1/8 (reachable, far)."""
    from prl_model_init import make_model

    from prl.testing.distill import sharpened_model

    return sharpened_model(make_model(out.with_name(out.name + "-base"), seed=0, force=True), out, scale=8.0)


def _sampler(out: Path) -> Path:
    """sft's sampler: another seed's tiny model at temperature 1/8, so its answers are far
    from the student's own and the cross-entropy on them starts high."""
    from prl_model_init import make_model

    from prl.testing.distill import sharpened_model

    return sharpened_model(make_model(out.with_name(out.name + "-base"), seed=1, force=True), out, scale=8.0)


def _demo_warm_start(model_dir: Path) -> None:
    from warmstart import demo_warm_start

    demo_warm_start(model_dir, TEMPLATE)


TEMPLATE = "The correct reply to the next request is: {demonstration}"
DISTILL = {"steps": 20, "group_size": 2, "batch_size": 8, "max_tokens": 16, "lr": 3e-3}
DISTILL["taskset"] = 'id = "reverse-text"'  # its default texts of 1-3 words


def _distill(algo: str, signal: str, margin: float, tolerance: float, **kw) -> GoldenRun:
    """A distillation run: its one signal is a trainer metric that must fall."""
    return GoldenRun(algo, signals={signal: margin}, tolerance={signal: tolerance}, trainer_signals=(signal,),
                     **{**DISTILL, **kw})  # fmt: skip


RUNS: dict[str, GoldenRun] = {
    "grpo": GoldenRun('type = "grpo"'),
    "max_rl": GoldenRun('type = "max_rl"'),
    "echo": GoldenRun('type = "echo"\nroles = { user = { alpha = 0.1 } }'),
    # debug's advantage is a constant, whatever the reward: it sharpens the policy towards its
    # own samples, so its signal is the entropy falling, and its reward is compared only
    "debug": GoldenRun('type = "debug"', signals={"entropy/all/mean": -0.5, "reward/all/mean": None}),
    # single-agent here: rae's per-agent baseline is then one running baseline of the reward,
    # and hierarchical_grpo's (no agent of an episode role) the group mean
    "rae": GoldenRun('type = "rae"'),
    "hierarchical_grpo": GoldenRun('type = "hierarchical_grpo"\nepisode_agents = ["solver"]'),
    # grpo on the tiny Mixture-of-Experts model (8 experts, top-2), warm-started like the
    # dense runs (the warm start trains its routers); RL keeps them frozen (freeze_moe_router
    # "auto"), so only attention, experts and embeddings learn
    "grpo_moe": GoldenRun('type = "grpo"', preset="tiny-moe", trainer_log=("4 routers (frozen)",)),
    # reverse KL to a frozen teacher, served for the run
    "opd": _distill(
        'type = "opd"',
        "loss/ref_kl",
        -0.3,
        0.15,
        frozen=_teacher,
        prepare=None,
        extra='[orchestrator.train.algo.teacher]\nname = "{frozen}"\nbase_url = "{url}"',
    ),
    # cross-entropy on a frozen sampler's answers
    "sft": _distill(
        'type = "sft"',
        "loss/ce",
        -1.0,
        0.4,
        frozen=_sampler,
        prepare=None,
        extra='[orchestrator.train.algo.sampling.source]\nname = "{frozen}"\nbase_url = "{url}"',
    ),
    # reverse KL to the policy shown the answer; a random tiny model barely reads its context,
    # so it starts warm: taught to answer differently with and without the demonstration.
    # Tolerance 1.0: the first window averages a KL of 1-3 nats falling to 0 within six
    # steps, and which answers those steps sample moves it (1.96 recorded, 2.57 on a loaded
    # two-core machine); an opsd that stopped learning would leave the later windows (~0) by
    # more than that.
    "opsd": _distill(
        f'type = "opsd"\ndemo_key = "answer"\ntemplate = "{TEMPLATE}"',
        "loss/ref_kl",
        -0.5,
        1.0,
        prepare=_demo_warm_start,
        steps=15,
        lr=1e-3,
    ),
}


def config_toml(run: GoldenRun, model: Path, out: Path) -> str:
    """The run's config: the tiny run of the end-to-end tests with this run's sizes, algorithm
    and taskset, deterministic from its seed, and its ``extra`` TOML on top."""
    source = {"name": "golden", "env": {"taskset": tomllib.loads(run.taskset)}}
    sampling = {"max_completion_tokens": run.max_tokens}
    train = {"group_size": run.group_size, "sampling": sampling, "algo": tomllib.loads(run.algo), "source": [source]}
    orchestrator = {"batch_size": run.batch_size, "deterministic": True, "seed": run.seed, "train": train}
    sizes = {"max_steps": run.steps, "seq_len": 512, "orchestrator": orchestrator, "trainer": {"optim": {"lr": run.lr}}}
    return toml_text(tiny_rl_config(model, out, sizes, tomllib.loads(run.extra)))


def base_model(run: GoldenRun, cache: Path) -> Path:
    """The run's starting model: the ``preset`` model of its seed, warm-started by ``prepare``;
    built once per ``cache`` directory and shared by the runs that start alike."""
    from prl_model_init.build import make_model

    key = f"{run.preset}-seed{run.seed}-{run.prepare.__name__ if run.prepare else 'random'}"
    target = cache / key
    if not target.exists():
        building = cache / f"{key}.building"
        shutil.rmtree(building, ignore_errors=True)
        make_model(building, preset=run.preset, seed=run.seed)
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
    with frozen_server(run, workdir) as (frozen, url):
        body = config_toml(run, model, workdir / "outputs").replace("{frozen}", frozen).replace("{url}", url)
        toml.write_text(body)
        code = cmd_rl(["@", str(toml), "--run.name", name])
    if code != 0:
        raise RuntimeError(f"prl rl for golden run '{name}' exited {code}")
    return read_curve(workdir / "outputs" / name, run)


@contextmanager
def frozen_server(run: GoldenRun, workdir: Path) -> Iterator[tuple[str, str]]:
    """(path, base URL) of the run's frozen model served for the run's length; ("", "") if none."""
    if run.frozen is None:
        yield "", ""
        return
    from prl.testing.servers import running_inference

    frozen = run.frozen(workdir / "frozen")
    with running_inference(frozen, workdir / "frozen-server") as url:
        yield str(frozen), url


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
    """Mean of the run's second half minus the mean of its first window.

    A deterministic run's first steps repeat bit for bit on every machine; later steps drift
    apart once float differences between CPUs change a sample, and one five-step window of
    them is noisy (hierarchical_grpo, single-agent so grpo's advantages, rose +0.06 over its
    last window on one machine and +0.03 on CI's; grpo itself +0.11). Half a run's steps
    average that noise down: +0.061 and +0.049 for those two hierarchical_grpo runs."""
    half = values[len(values) // 2 :]
    return sum(half) / len(half) - sum(values[:WINDOW]) / WINDOW


def passes(moved: float, margin: float | None) -> bool:
    """A positive margin is a least rise, a negative one a least fall; None always passes."""
    if margin is None:
        return True
    return moved >= margin if margin > 0 else moved <= margin


def curve_path(name: str) -> Path:
    return CURVES / f"{name}.json"
