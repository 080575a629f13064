"""Golden learning curves (see ``runs.py``): every algorithm's short CPU run must learn by
its stated margin and stay within tolerance of its recorded curve. Slow: about 1-2 min per
algorithm on two cores. Re-record with ``python tests/golden/record.py``."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from runs import RUNS, curve_path, execute, learned, passes, windows  # noqa: E402

for _dist in ("prl_model_init", "prl_inference_torch", "prl_launcher_local", "prl_tasks_builtin", "prl_trainer_torch"):
    pytest.importorskip(_dist)


def _installed(algo_type: str) -> bool:
    from prl.plugins import get_registry

    return algo_type in get_registry().classes("algorithms")


@pytest.fixture(scope="module")
def golden_cache(tmp_path_factory):
    """Warm-started starting models, built once and shared by the runs of this module."""
    return tmp_path_factory.mktemp("golden-models")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RUNS))
def test_golden_curve(name, tmp_path, golden_cache):
    algo_type = tomllib.loads(RUNS[name].algo)["type"]
    if not _installed(algo_type):
        pytest.skip(f"algorithm '{algo_type}' is not installed")
    recorded_file = curve_path(name)
    assert recorded_file.exists(), f"no recorded curve: run `python tests/golden/record.py {name}`"
    recorded = json.loads(recorded_file.read_text())["curve"]
    run = RUNS[name]
    curve = execute(name, tmp_path, golden_cache)
    if run.trainer_log:
        trainer_log = (tmp_path / "outputs" / name / "logs" / "attempt_1" / "trainer.log").read_text()
        for text in run.trainer_log:
            assert text in trainer_log, f"{name}: the trainer's log does not say {text!r}"
    for signal, margin in run.signals.items():
        moved = learned(curve[signal])
        shown = [round(x, 3) for x in windows(curve[signal])]
        print(f"golden {name}: {signal} moved {moved:+.4f} (margin {margin}), window means {shown}")
        assert passes(moved, margin), f"{name}: {signal} moved {moved:+.4f} in {run.steps} steps, margin {margin}"
        new, old = windows(curve[signal]), windows(recorded[signal])
        assert len(new) == len(old), f"{name}: {signal} has {len(new)} windows, the recorded curve {len(old)}"
        gaps = [abs(a - b) for a, b in zip(new, old, strict=True)]
        tolerance = run.tolerance[signal]
        assert max(gaps) <= tolerance, (
            f"{name}: {signal} window means {[round(x, 3) for x in new]} left the recorded "
            f"{[round(x, 3) for x in old]} by {max(gaps):.3f} (tolerance {tolerance})"
        )
