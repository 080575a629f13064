"""Per-step orchestrator metrics, the console line, and the monitors they go to.

Rollout statistics cover every episode that finished since the previous step (whether or
not it made it into the batch), both for all envs and per env:
``reward/{all,<env>}/{mean,std,min,max}``, ``seq_len/{all,<env>}/mean`` (tokens per
episode, all branches), ``is_truncated``, ``turns``, ``timeout``, ``errored`` and ``empty``
as fractions of episodes, plus ``*/count``; multi-agent tasksets add
``agent_reward/{all,<env>}/<role>/mean``.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from prl.orchestrator.samples import is_empty
from prl.types import Trace

log = logging.getLogger(__name__)


def _stats(values: list[float]) -> dict[str, float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / n
    return {"mean": mean, "std": math.sqrt(var), "min": min(values), "max": max(values)}


def rollout_metrics(traces: list[Trace]) -> dict[str, float]:
    by_env: dict[str, list[Trace]] = {"all": list(traces)}
    for t in traces:
        by_env.setdefault(t.env, []).append(t)
    out: dict[str, float] = {}
    for env, group in by_env.items():
        if not group:
            continue
        n = len(group)
        for key, value in _stats([t.reward for t in group]).items():
            out[f"reward/{env}/{key}"] = value
        out[f"seq_len/{env}/mean"] = sum(sum(len(b.token_ids) for b in t.branches) for t in group) / n
        out[f"turns/{env}/mean"] = sum(t.turns for t in group) / n
        out[f"is_truncated/{env}/mean"] = sum(t.is_truncated for t in group) / n
        out[f"timeout/{env}/mean"] = sum(t.is_timeout for t in group) / n
        out[f"errored/{env}/mean"] = sum(t.error is not None for t in group) / n
        out[f"empty/{env}/mean"] = sum(is_empty(t) for t in group) / n
        out[f"rollouts/{env}/count"] = float(n)
        out.update(agent_metrics(env, group))
    return out


def agent_metrics(env: str, traces: list[Trace]) -> dict[str, float]:
    """``agent_reward/<env>/<role>/mean``: multi-agent tasksets score each agent in
    ``trace.agent_rewards`` (ids ``<role>`` or ``<role>/<i>``); the mean is over every agent
    of that role in every episode that scored one."""
    by_role: dict[str, list[float]] = {}
    for t in traces:
        for agent, reward in t.agent_rewards.items():
            by_role.setdefault(agent.split("/", 1)[0], []).append(float(reward))
    return {f"agent_reward/{env}/{role}/mean": sum(v) / len(v) for role, v in by_role.items()}


def console_line(step: int, m: dict[str, float]) -> str:
    reward = m.get("reward/all/mean", float("nan"))
    parts = [
        f"Step {step}",
        f"Time {m.get('time/step', 0.0):.2f}s",
        f"Reward {reward:.4f}",
        f"Seq len {m.get('seq_len/all/mean', 0.0):.1f}",
        f"Samples {int(m.get('batch/samples', 0))}",
        f"Off-policy {m.get('off_policy/mean_steps', 0.0):.2f}",
        f"Wait policy {m.get('time/wait_for_policy', 0.0):.2f}s",
        f"Version {int(m.get('progress/policy_version', 0))}",
    ]
    return " | ".join(parts)


def finite(metrics: dict[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def trace_record(trace: Trace, group: str, dispatch: int, arrival: float, duration: float) -> dict[str, Any]:
    """A shallow dict of ``trace`` for ``Monitor.log_traces`` (no deep copies of token lists)."""
    record = dict(vars(trace))
    record["branches"] = [dict(vars(b)) for b in trace.branches]
    advantages = [a for b in trace.branches for a, s in zip(b.advantages or [], b.sampled_mask, strict=False) if s][:1]
    record.update(
        id=trace.trace_id,
        kind="train",
        group=group,
        ok=trace.ok,
        advantage=advantages[0] if advantages else None,
        tokens=sum(len(b.token_ids) for b in trace.branches),
        truncated=trace.is_truncated,
        dispatch=dispatch,
        arrival=arrival,
        duration=duration,
    )
    return record
