"""prl.eval.run_eval over reverse-text with a scripted policy: metrics, results, resume."""

from __future__ import annotations

import json

import pytest

import prl.orchestrator.run
from prl.config.roots import EvalConfig
from prl.eval import run_eval
from prl.tasks.testing import ByteRenderer, ScriptedClient, last_user


def config(tmp_path, **kw) -> EvalConfig:
    data = {
        "output_dir": str(tmp_path),
        "run": {"name": "ev"},
        "group_size": 2,
        "source": [{"name": "rt", "env": {"taskset": {"id": "reverse-text", "num_eval": 6}}}],
        **kw,
    }
    return EvalConfig.model_validate(data)


@pytest.fixture
def policy(monkeypatch):
    """Install a scripted client (a fresh one per run_eval) and count its calls."""
    state = {"fn": lambda msgs: last_user(msgs)[::-1], "calls": 0}

    def make_client(cfg):
        def counted(msgs):
            state["calls"] += 1
            return state["fn"](msgs)

        return ScriptedClient(counted)

    monkeypatch.setattr(prl.orchestrator.run, "build_client", make_client)
    monkeypatch.setattr(prl.orchestrator.run, "build_renderer", lambda cfg: ByteRenderer())
    return state


def test_perfect_policy_scores_one_and_writes_results(tmp_path, policy, capsys):
    run_dir = tmp_path / "ev"
    assert run_eval(config(tmp_path), run_dir) == 0
    out = capsys.readouterr().out
    assert "Evaluated rt" in out and "Reward 1.0000" in out
    summary = json.loads((run_dir / "results" / "rt.json").read_text())
    assert summary["eval/rt/avg@2"] == 1.0 and summary["eval/rt/pass@2"] == 1.0
    assert summary["eval/rt/all/default/reward/mean"] == 1.0 and summary["eval/rt/exact/mean"] == 1.0
    rows = [json.loads(x) for x in (run_dir / "results" / "rt.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and policy["calls"] == 12
    # keep_last = 1: only the final cursor checkpoint remains
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step_6"]
    progress = json.loads((run_dir / "checkpoints" / "step_6" / "evals" / "progress.pt").read_text())
    assert progress["cursor"] == 6 and len(progress["groups"]["rt"]) == 6


def test_pass_at_k_needs_one_full_reward_per_example(tmp_path, policy):
    seen: dict[str, int] = {}

    def first_right_then_empty(msgs):
        text = last_user(msgs)
        seen[text] = seen.get(text, 0) + 1
        return text[::-1] if seen[text] == 1 else ""

    policy["fn"] = first_right_then_empty
    run_dir = tmp_path / "ev"
    assert run_eval(config(tmp_path), run_dir) == 0
    summary = json.loads((run_dir / "results" / "rt.json").read_text())
    assert summary["eval/rt/avg@2"] == pytest.approx(0.5) and summary["eval/rt/pass@2"] == 1.0


def test_resume_skips_completed_groups_and_drops_partial_ones(tmp_path, policy):
    run_dir = tmp_path / "ev"
    assert run_eval(config(tmp_path, num_examples=3), run_dir) == 0
    assert policy["calls"] == 6
    # a crash left rollouts of an unfinished group behind: they must not be counted
    with (run_dir / "results" / "rt.jsonl").open("a") as fh:
        fh.write(json.dumps({"group": "eval/5", "index": 0, "reward": 0.0}) + "\n")
    policy["calls"] = 0
    assert run_eval(config(tmp_path, resume={}), run_dir) == 0
    assert policy["calls"] == 6  # only the 3 groups not yet done, 2 rollouts each
    rows = [json.loads(x) for x in (run_dir / "results" / "rt.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and sorted({r["group"] for r in rows}) == [f"eval/{i}" for i in range(6)]
    summary = json.loads((run_dir / "results" / "rt.json").read_text())
    assert summary["eval/rt/num_examples"] == 6 and summary["eval/rt/avg@2"] == 1.0


def test_when_every_rollout_fails_there_is_no_reward_and_the_exit_is_non_zero(tmp_path, policy, capsys):
    def broken(msgs):
        raise RuntimeError("server said no")

    policy["fn"] = broken
    run_dir = tmp_path / "ev"
    assert run_eval(config(tmp_path, ckpt=None), run_dir) == 1
    assert "all of 12 rollouts failed: RuntimeError: server said no" in capsys.readouterr().out
    summary = json.loads((run_dir / "results" / "rt.json").read_text())
    assert "eval/rt/avg@2" not in summary and "eval/rt/pass@2" not in summary
    assert summary["failed_rollouts"] == 12 and summary["first_error"] == "RuntimeError: server said no"
    assert summary["eval/rt/all/default/has_error/mean"] == 1.0
    assert not (run_dir / "checkpoints").exists()


def test_failed_rollouts_are_counted_and_left_out_of_the_mean(tmp_path, policy, capsys):
    failing = {"eval/0", "eval/1"}  # task ids; their prompts are recognised by text below
    texts = {t.task_id: t.data["text"] for t in _tasks()}

    def some_fail(msgs):
        text = last_user(msgs)
        if any(texts[i] in text for i in failing):
            raise RuntimeError("HTTP 500")
        return text[::-1]

    policy["fn"] = some_fail
    run_dir = tmp_path / "ev"
    assert run_eval(config(tmp_path, ckpt=None), run_dir) == 0
    assert "4 of 12 rollouts failed: RuntimeError: HTTP 500" in capsys.readouterr().out
    summary = json.loads((run_dir / "results" / "rt.json").read_text())
    # the 8 rollouts that completed all reversed right: 1.0, not 8/12
    assert summary["eval/rt/avg@2"] == 1.0 and summary["eval/rt/pass@2"] == 1.0
    assert summary["failed_rollouts"] == 4 and summary["eval/rt/num_failed"] == 4
    assert summary["eval/rt/all/default/has_error/mean"] == pytest.approx(4 / 12)


def _tasks():
    from prl_tasks_builtin.reverse_text import ReverseText

    return list(ReverseText(ReverseText.Config(num_eval=6)).tasks("eval"))
