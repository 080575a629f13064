"""Multi-agent learning for real: the tiny model, warm-started to answer in each taskset's
format (``warmstart.py``), raises the per-agent reward of the agents being trained.

* ``hierarchical_grpo`` on proposer-solver (2 solvers a problem, numbers 0..3, one
  operator): the solvers' reward rises. The warm start leaves solvers that are right about
  one time in eight; each solver's baseline is the other solver of the same problem.
* ``rae`` on kuhn-poker: both seats stop making invalid moves, so the seat-mean reward
  rises towards 0.5 (every hand legal; the game is zero-sum).

Both are ``long`` (``make test-long``): measured figures and why are in each test's docstring.
The proposer-solver run only learns since its solvers sample apart in a seeded run
(``prl_tasks_builtin.proposer_solver.solver_sampling``); before, both solvers of a problem
shared the episode's seed, always agreed, and every trace was filtered as signal-free.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from runs import WINDOW, GoldenRun, config_toml  # noqa: E402

for _dist in ("prl_model_init", "prl_inference_torch", "prl_launcher_local", "prl_tasks_builtin", "prl_trainer_torch"):
    pytest.importorskip(_dist)


def agent_rewards(run: GoldenRun, model: Path, workdir: Path) -> dict[str, list[float]]:
    """Run ``prl rl`` in-process; the per-step reward of each role (``agent_reward/golden/<role>/mean``)."""
    from prl.cli.commands import cmd_rl

    toml = workdir / "run.toml"
    toml.write_text(config_toml(run, model, workdir / "out"))
    assert cmd_rl(["@", str(toml), "--run.name", "multi"]) == 0
    rows = [json.loads(x) for x in (workdir / "out" / "multi" / "monitors" / "file" / "metrics.jsonl").open()]
    prefix = "agent_reward/golden/"
    orch = sorted((r for r in rows if r.get("producer") == "orch" and r.get("step")), key=lambda r: r["step"])
    roles = {k[len(prefix) : -len("/mean")] for r in orch for k in r if k.startswith(prefix) and k.endswith("/mean")}
    return {role: [r.get(f"{prefix}{role}/mean", 0.0) for r in orch] for role in roles}


def first_last(values: list[float]) -> tuple[float, float]:
    """Means of the first and the last ``WINDOW`` steps."""
    return sum(values[:WINDOW]) / WINDOW, sum(values[-WINDOW:]) / WINDOW


PROPOSER_SOLVER = 'id = "proposer-solver"\nnum_solvers = 2\nmax_number = 3\nmax_ops = 1'
SOLVER_GAIN = 0.05  # solvers' reward, last 5 steps minus first 5 (measured: +0.22, +0.79, +0.72)


@pytest.mark.slow
@pytest.mark.long
def test_hierarchical_grpo_on_proposer_solver_raises_solver_reward(tmp_path):
    """20 steps of 16 episodes (1 proposer + 2 solvers each), lr 3e-3, from a warm start whose
    solvers are right about one time in eight. Measured on two shared CPU cores (first vs
    last 10 steps; orchestrator seed): seed 0 solver 0.157 -> 0.331, proposer 0.201 -> 0.328
    (5-step windows: solver 0.144 -> 0.364); seed 1 solver 0.308 -> 0.883 (0.174 -> 0.966),
    proposer 0.282 -> 0.101 (its problems became so easy that every solver is right, which
    scores a proposer 0); seed 2 solver 0.405 -> 0.938 (0.270 -> 0.986), proposer 0.294 ->
    0.065. Warm start ~250 s, RL 480 s, 291 s and 208 s, on cores shared with other runs at
    higher priority. ``long`` until timed within ~4 minutes on an idle machine."""
    pytest.importorskip("prl_algo_hierarchical_grpo")
    from prl_model_init.build import make_model
    from warmstart import proposer_solver_warm_start

    model = Path(make_model(tmp_path / "model", preset="tiny"))
    proposer_solver_warm_start(model, max_number=3, max_ops=1)
    algo = 'type = "hierarchical_grpo"\nepisode_agents = ["solver"]'
    run = GoldenRun(algo, PROPOSER_SOLVER, {}, steps=20, group_size=4, batch_size=16, max_tokens=6, lr=3e-3)
    rewards = agent_rewards(run, model, tmp_path)
    first, last = first_last(rewards["solver"])
    print(f"proposer-solver: solver {first:.3f} -> {last:.3f}, proposer {first_last(rewards['proposer'])}")
    assert last - first >= SOLVER_GAIN, f"solver reward {first:.3f} -> {last:.3f} (least gain {SOLVER_GAIN})"


KUHN_GAIN = 0.04  # seat-mean reward, last 5 steps minus first 5
KUHN_FINAL = 0.48  # seat-mean reward of the last 5 steps (0.5: no invalid move left)
KUHN = {"steps": 40, "group_size": 4, "batch_size": 16, "max_tokens": 6, "lr": 3e-3}
KUHN_SAMPLING = "[orchestrator.train.sampling]\ntemperature = 1.5"
# seat-mean reward, first vs last 5 steps, per orchestrator seed (2026-12-02, two shared cores)
KUHN_MEASURED = {
    0: (0.399, 0.494),
    1: (0.402, 0.498),
    2: (0.389, 0.498),
    3: (0.393, 0.492),
    4: (0.413, 0.498),
    5: (0.407, 0.500),
}


@pytest.mark.slow
@pytest.mark.long
def test_rae_on_kuhn_poker_learns_legal_play(tmp_path):
    """40 steps of 16 hands, lr 3e-3, sampled at temperature 1.5. Both seats share one model,
    so a seat that bets is paid whenever the other answers a bet with "bet" (an invalid
    move): at temperature 1.0 and lr 5e-3 over 30 steps, 2 orchestrator seeds of 4 collapsed
    to "bet" in every reply (seat-mean 0.375: every hand invalid; 0.386 -> 0.375 and
    0.391 -> 0.375) and 2 learnt (0.439 -> 0.500, 0.432 -> 0.494); at temperature 1.5 with
    the same lr, 3 of 4 learnt. With the lower lr, more steps and temperature 1.5 every seed
    tried learnt: see KUHN_MEASURED. ``long`` for its time: the warm start takes about seven
    minutes on two cores and the RL three to five."""
    pytest.importorskip("prl_algo_rae")
    from prl_model_init.build import make_model
    from warmstart import kuhn_warm_start

    model = Path(make_model(tmp_path / "model", preset="tiny"))
    kuhn_warm_start(model)
    run = GoldenRun('type = "rae"', 'id = "kuhn-poker"', {}, extra=KUHN_SAMPLING, **KUHN)
    rewards = agent_rewards(run, model, tmp_path)
    seats = [(a + b) / 2 for a, b in zip(rewards["player1"], rewards["player2"], strict=True)]
    first, last = first_last(seats)
    print(f"kuhn-poker: seat-mean {first:.3f} -> {last:.3f}")
    assert last - first >= KUHN_GAIN and last >= KUHN_FINAL, f"seat-mean reward {first:.3f} -> {last:.3f}"
