"""Multi-agent learning for real: ``rae`` on kuhn-poker, from the tiny model warm-started to
answer with action words (``warmstart.py``), removes invalid moves within 30 RL steps.

Measured (30 steps, 16 hands a step, 2 shared CPU cores: warm start ~7 min, RL ~2 min):
mean reward of the two seats 0.427 -> 0.500 (first vs last 5 steps; 0.5 is every hand
legal), player2 0.352 -> 0.575, player1 0.501 -> 0.425 (zero-sum once no move is invalid:
player2 learns faster). Slow: about ten minutes on two cores.

Not reliable yet, so marked ``long`` (``make test-long``, outside ``make test``): in a
fresh-clone CI run the same recipe went 0.406 -> 0.375. Making it learn every time is open
work (a longer warm start or run, or more hands a step).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from runs import GoldenRun, config_toml  # noqa: E402

for _dist in ("prl_model_init", "prl_inference_torch", "prl_launcher_local", "prl_tasks_builtin", "prl_trainer_torch"):
    pytest.importorskip(_dist)
pytest.importorskip("prl_algo_rae")

MIN_GAIN = 0.04  # seat-mean reward, last 5 steps minus first 5 (measured: +0.073)
MIN_FINAL = 0.48  # seat-mean reward of the last 5 steps (0.5: no invalid move left)


@pytest.mark.slow
@pytest.mark.long
def test_rae_on_kuhn_poker_learns_legal_play(tmp_path):
    from prl_model_init.build import make_model
    from warmstart import kuhn_warm_start

    from prl.cli.commands import cmd_rl

    model = make_model(tmp_path / "model", preset="tiny")
    kuhn_warm_start(Path(model))
    kuhn = {"steps": 30, "group_size": 4, "batch_size": 16, "max_tokens": 6, "lr": 5e-3}  # as measured
    run = GoldenRun('type = "rae"', 'id = "kuhn-poker"', {}, **kuhn)
    toml = tmp_path / "rae.toml"
    toml.write_text(config_toml(run, Path(model), tmp_path / "out"))
    assert cmd_rl(["@", str(toml), "--run.name", "kuhn"]) == 0
    rows = [json.loads(x) for x in (tmp_path / "out" / "kuhn" / "monitors" / "file" / "metrics.jsonl").open()]
    orch = [r for r in rows if r.get("producer") == "orch" and r.get("step")]
    seats = [(r["agent_reward/golden/player1/mean"] + r["agent_reward/golden/player2/mean"]) / 2 for r in orch]
    first, last = sum(seats[:5]) / 5, sum(seats[-5:]) / 5
    assert last - first >= MIN_GAIN and last >= MIN_FINAL, f"seat-mean reward {first:.3f} -> {last:.3f}"
