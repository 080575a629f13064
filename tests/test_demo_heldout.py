"""The demo's held-out figures (examples/reverse-text/heldout.py): per-text means, the
standard error over texts, the gain and the verdict line."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "reverse-text" / "heldout.py"


def _eval_run(root: Path, name: str, rewards: dict[str, list[float]]) -> Path:
    index = root / name / "monitors" / "file" / "traces" / "stream.index.jsonl"
    index.parent.mkdir(parents=True)
    rows = [{"kind": "eval", "group": g, "reward": r} for g, rs in rewards.items() for r in rs]
    rows.append({"kind": "train", "group": "x", "reward": 99.0})  # not an eval episode: ignored
    index.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root / name


def _run(capsys, *dirs: Path) -> list[str]:
    argv = sys.argv
    sys.argv = [str(SCRIPT), *map(str, dirs)]
    try:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    finally:
        sys.argv = argv
    return capsys.readouterr().out.splitlines()


def test_standard_error_is_over_texts_and_the_gain_is_judged(tmp_path, capsys):
    # per-text means 0.2, 0.4, 0.3 (sd 0.1, se 0.1/sqrt(3)); after: 0.5, 0.6, 0.55
    before = _eval_run(tmp_path, "before", {"eval/0": [0.1, 0.3], "eval/1": [0.4, 0.4], "eval/2": [0.3, 0.3]})
    after = _eval_run(tmp_path, "after", {"eval/0": [0.5, 0.5], "eval/1": [0.6, 0.6], "eval/2": [0.5, 0.6]})
    out = _run(capsys, before, after)
    assert out[0].endswith("held-out reward 0.3000 ± 0.0577 (standard error over 3 texts)")
    assert out[1].endswith("held-out reward 0.5500 ± 0.0289 (standard error over 3 texts)")
    assert out[2].startswith("gain +0.2500 ± 0.0645 unpaired (3.9 standard errors)")
    assert out[3].startswith("verdict: RL learned")


def test_failed_rollouts_are_left_out_of_a_texts_mean(tmp_path, capsys):
    run = _eval_run(tmp_path, "r", {"eval/0": [0.2, 0.4], "eval/1": [0.6]})
    index = run / "monitors" / "file" / "traces" / "stream.index.jsonl"
    with index.open("a") as fh:  # a rollout whose request failed: reward 0.0, ok false
        fh.write(json.dumps({"kind": "eval", "group": "eval/1", "reward": 0.0, "ok": False}) + "\n")
    assert _run(capsys, run)[0].endswith("held-out reward 0.4500 ± 0.1500 (standard error over 2 texts)")


def test_a_small_gain_is_not_called_learning(tmp_path, capsys):
    before = _eval_run(tmp_path, "b", {"eval/0": [0.30], "eval/1": [0.32]})
    after = _eval_run(tmp_path, "a", {"eval/0": [0.35], "eval/1": [0.37]})
    assert _run(capsys, before, after)[-1].startswith("verdict: no clear gain")


def test_a_directory_without_traces_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit, match="is .* a prl eval run directory"):
        _run(capsys, tmp_path)
