"""sft for real: a frozen sampler served by ``prl inference`` and a short ``prl rl`` run on
CPU whose cross-entropy on the sampler's tokens goes down."""

from __future__ import annotations

import pytest

pytest.importorskip("prl_model_init")
pytest.importorskip("prl_inference_torch")
pytest.importorskip("prl_launcher_local")
pytest.importorskip("prl_tasks_builtin")
pytest.importorskip("prl_trainer_torch")

from prl.testing.configs import distill_overrides, tiny_rl_toml  # noqa: E402
from prl.testing.distill import sharpened_model, trainer_metrics  # noqa: E402
from prl.testing.servers import running_inference  # noqa: E402

STEPS = 10


def _sft_toml(tmp_path, student, sampler, url):
    algo = {"type": "sft", "sampling": {"source": {"name": str(sampler), "base_url": url}}}
    return tiny_rl_toml(tmp_path, student, distill_overrides(algo, STEPS), name="sft.toml")


@pytest.mark.slow
def test_sft_learns_the_frozen_models_answers(tmp_path, capsys):
    from prl_model_init import make_model

    from prl.cli.commands import cmd_rl

    student = make_model(tmp_path / "student", preset="tiny", seed=0)
    # A differently-seeded, low-entropy sampler: its answers are far from the student's.
    sampler = sharpened_model(make_model(tmp_path / "base", seed=1), tmp_path / "sampler", scale=8.0)
    with running_inference(sampler, tmp_path / "sampler-server") as url:
        code = cmd_rl(["@", str(_sft_toml(tmp_path, student, sampler, url)), "--run.name", "sft"])
    assert code == 0, capsys.readouterr().err[-3000:]
    ce = trainer_metrics(tmp_path / "outputs" / "sft", "loss/ce")
    assert sorted(ce) == list(range(1, STEPS + 1))
    first, last = (sum(ce[s] for s in steps) / 3 for steps in (range(1, 4), range(STEPS - 2, STEPS + 1)))
    print(f"sft cross-entropy on the sampler's tokens: {first:.3f} -> {last:.3f} (steps 1-3 -> {STEPS - 2}-{STEPS})")
    assert last < 0.8 * first
