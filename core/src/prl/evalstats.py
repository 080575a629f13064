"""Per-rollout eval records and their avg@k / pass@k summary, shared by ``prl eval`` and
the orchestrator's online evals (see :mod:`prl.eval` for the definitions)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

from prl.types import Trace


def rollout_record(trace: Trace, group: str, index: int) -> dict[str, Any]:
    """The compact per-rollout result kept in progress files and results/<env>.jsonl."""
    return {
        "group": group,
        "index": index,
        "task_id": trace.task_id,
        "trace_id": trace.trace_id,
        "reward": trace.reward,
        "agent_rewards": dict(trace.agent_rewards),
        "agents": sorted({b.agent for b in trace.branches}),
        "metrics": dict(trace.metrics),
        "seq_len": sum(len(b.token_ids) for b in trace.branches),
        "turns": trace.turns,
        "is_truncated": trace.is_truncated,
        "is_timeout": trace.is_timeout,
        "error": trace.error,
        "messages": trace.messages,
    }


def trace_records(traces: list[Trace], group: str) -> list[dict[str, Any]]:
    """Eval rollouts as the records monitors store (``kind = "eval"``, the dashboard's
    traces view); ``prl eval`` and online evals both log them."""
    return [{**dataclasses.asdict(t), "kind": "eval", "group": group} for t in traces]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def failed(row: dict[str, Any]) -> bool:
    """A rollout that errored or timed out: it produced no answer, so no reward to average."""
    return row["error"] is not None or bool(row["is_timeout"])


def failures(groups: dict[str, list[dict[str, Any]]]) -> tuple[int, int, str | None]:
    """``(failed, total, first error)`` over every rollout of ``groups``."""
    rows = [r for g in groups.values() for r in g]
    bad = [r for r in rows if failed(r)]
    return len(bad), len(rows), (bad[0]["error"] or "timed out") if bad else None


def failure_note(groups: dict[str, list[dict[str, Any]]]) -> str | None:
    """``"3 of 40 rollouts failed: <first error>"``, or None when none failed."""
    n, total, first = failures(groups)
    if not n:
        return None
    return f"{'all' if n == total else n} of {total} rollouts failed: {first}"


def summarize(env: str, groups: dict[str, list[dict[str, Any]]], k: int) -> dict[str, float]:
    """Metrics of one source from its completed groups (see the module docstring). Rewards,
    avg@k and pass@k cover only the rollouts that completed: a failed rollout counts in
    ``num_failed`` and ``has_error``, never as a zero reward. No rollout completed: no
    reward metrics at all, so nothing reports 0.0 for a server that never answered."""
    rows = [r for g in groups.values() for r in g]
    if not rows:
        return {}
    p = f"eval/{env}"
    out = {
        f"{p}/num_examples": float(len(groups)),
        f"{p}/num_rollouts": float(len(rows)),
        f"{p}/num_failed": float(sum(failed(r) for r in rows)),
    }
    ok = {g: [r for r in rows_ if not failed(r)] for g, rows_ in groups.items()}
    ok = {g: rows_ for g, rows_ in ok.items() if rows_}
    done = [r for g in ok.values() for r in g]
    if done:
        out[f"{p}/avg@{k}"] = _mean([r["reward"] for r in done])
        out[f"{p}/pass@{k}"] = _mean([float(max(r["reward"] for r in g) >= 1.0) for g in ok.values()])
        out[f"{p}/all/seq_len/mean"] = _mean([float(r["seq_len"]) for r in done])
    out[f"{p}/is_timeout/mean"] = _mean([float(r["is_timeout"]) for r in rows])
    per_agent: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        agents = r["agent_rewards"] or {"default": r["reward"]}
        for agent, reward in agents.items():
            if not failed(r):
                per_agent[agent]["reward"].append(reward)
                per_agent[agent]["is_truncated"].append(float(r["is_truncated"]))
            per_agent[agent]["has_error"].append(float(failed(r)))
    for agent, fields in per_agent.items():
        for name, values in fields.items():
            if values:
                out[f"{p}/all/{agent}/{name}/mean"] = _mean(values)
    env_metrics: dict[str, list[float]] = defaultdict(list)
    for r in done:
        for name, value in r["metrics"].items():
            env_metrics[name].append(float(value))
    for name, values in env_metrics.items():
        out[f"{p}/{name}/mean"] = _mean(values)
    return out


# ---- cursor checkpoints --------------------------------------------------------------
