"""The end-of-run summary read back from a run directory (prl.summary): headline metric
first -> last, the newest complete checkpoint, the next commands, and on failure the
process to blame with its log."""

from __future__ import annotations

import json
from pathlib import Path

from prl import layout, procinfo
from prl.summary import Outcome, end_lines, start_lines


def _write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def _rl_run(tmp_path: Path) -> Path:
    run = tmp_path / "out" / "rt-run"
    resolved = run / "configs" / "attempt_1" / "resolved"
    _write(resolved / "trainer.json", {"ckpt": {"interval": 2, "output_dir": None}, "output_dir": str(run.parent)})
    _write(resolved / "orchestrator.json", {"monitors": {"file": {"path": None}}, "output_dir": str(run.parent)})
    _write(resolved / "envs" / "train" / "rt.json", {"name": "rt", "env": {"taskset": {"id": "reverse-text"}}})
    (run / "configs" / "latest").symlink_to("attempt_1")
    rows = [
        {"step": 1, "producer": "orch", "reward/all/mean": 0.125},
        {"step": 1, "producer": "trainer", "loss/all": 3.0},
        {"step": 2, "producer": "orch", "reward/all/mean": 0.5},
        {"step": None, "producer": "orch", "reward/all/mean": 9.0},  # a timed row: no step
        {"step": 3, "producer": "orch", "reward/all/mean": 0.25},
        {"step": 3, "producer": "orch", "reward/all/mean": 0.75, "attempt": 2},  # the resumed redo wins
    ]
    _write(
        run / "monitors" / "file" / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "pro'
    )
    for step, parts in ((2, layout.COMPONENTS["rl"]), (4, ("trainer",))):  # step 4 lacks the orchestrator's part
        for part in parts:
            layout.begin(layout.step_dir(run / "checkpoints", step), part)
            layout.mark_complete(layout.step_dir(run / "checkpoints", step), part)
    return run


def test_rl_summary_reads_reward_checkpoint_and_next_commands(tmp_path):
    run = _rl_run(tmp_path)
    lines = end_lines(Outcome("rl", run, run / "logs" / "attempt_1", 0, 83.4))
    ckpt = run / "checkpoints" / "step_2"
    assert lines == [
        f"Run finished in 83s: {run}",
        "  reward:          0.1250 → 0.7500 (step 1 → 3)",
        f"  last checkpoint: {ckpt}",
        f"  logs:            {run / 'logs' / 'attempt_1'}",
        "Next:",
        f"  prl export {ckpt}   # Hugging Face weights into {ckpt / 'weights'}",
        f"  prl inference --model.name {ckpt / 'weights'}   # serves them; then, in another shell:",
        f"  prl eval reverse-text --model.name {ckpt / 'weights'}",
        f"  prl dashboard {run.parent}",
    ]


def test_a_failed_run_names_the_process_that_failed_and_its_log(tmp_path):
    run = _rl_run(tmp_path)
    logs = run / "logs" / "attempt_1"
    for name in ("inference", "orchestrator", "trainer"):
        procinfo.record(logs, name, 100, logs / f"{name}.log")
    procinfo.record_exit(logs, "trainer", 3)
    lines = end_lines(Outcome("rl", run, logs, 3, 12.0))
    assert lines[:2] == [
        f"Run failed after 12s (exit code 3): {run}",
        f"  failed:          trainer (log: {logs}/trainer.log)",
    ]
    assert not any(line.startswith("Next:") for line in lines)


def test_sft_in_process_failure_blames_the_trainer_and_says_no_step_finished(tmp_path):
    run = tmp_path / "sft-run"
    _write(run / "configs" / "latest" / "resolved" / "sft.json", {"ckpt": None, "output_dir": str(tmp_path)})
    logs = run / "logs" / "attempt_1"
    lines = end_lines(Outcome("sft", run, logs, 1, 2.0, in_process={"trainer": logs / "trainer.log"}))
    assert lines == [
        f"Run failed after 2s (exit code 1): {run}",
        f"  failed:          trainer (log: {logs}/trainer.log)",
        "  loss:            no step finished",
        f"  logs:            {logs}",
    ]


def test_start_lines_name_the_run_and_each_log(tmp_path):
    logs = tmp_path / "run" / "logs" / "attempt_1"
    lines = start_lines(tmp_path / "run", logs, {"inference": logs / "inference.log", "trainer": logs / "trainer.log"})
    assert lines == [
        f"Run directory: {tmp_path / 'run'}",
        f"Starting inference, trainer ... (logs: {logs}: inference.log, trainer.log)",
    ]


def test_a_run_stopped_by_a_signal_blames_no_process(tmp_path):
    run = _rl_run(tmp_path)
    lines = end_lines(Outcome("rl", run, run / "logs" / "attempt_1", 130, 40.0))
    assert lines[:2] == [f"Run stopped by SIGINT after 40s: {run}", "  reward:          0.1250 → 0.7500 (step 1 → 3)"]
