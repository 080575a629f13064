"""Counting a trace's tokens and writing per-token training signals onto its branches:
the helpers every algorithm plugin scores with (core API, so algorithms share them
without importing each other).

A branch's sampled tokens (``sampled_mask`` true) are the policy's actions: they carry the
trace's advantage and feed the rl loss. Every other token (prompt, env observations) is
context: advantage 0 and weight 0 in every component, unless an algorithm trains on it on
purpose (echo's ce on env tokens does, by writing its own ce weights).
"""

from __future__ import annotations

from prl.types import Branch, Trace


def sampled_tokens(trace: Trace) -> int:
    """Tokens the policy sampled, over all branches (the trace's trainable tokens)."""
    return sum(sum(1 for s in branch.sampled_mask if s) for branch in trace.branches)


def context_tokens(trace: Trace) -> int:
    """Tokens the policy read but did not sample (prompt and env observations)."""
    return sum(len(branch.token_ids) for branch in trace.branches) - sampled_tokens(trace)


def assign(trace: Trace, advantage: float, rl_weight: float = 1.0) -> None:
    """Give every sampled token ``advantage`` and rl weight ``rl_weight``; context gets 0.

    ce and ref_kl weights are written as all-zero streams so every branch leaves the
    algorithm with the four token-aligned lists the trainer expects.
    """
    for branch in trace.branches:
        assign_branch(branch, advantage, rl_weight)


def assign_branch(branch: Branch, advantage: float, rl_weight: float = 1.0) -> None:
    """:func:`assign` for one branch (per-agent algorithms give each agent's branches their own)."""
    mask = branch.sampled_mask
    branch.advantages = [advantage if s else 0.0 for s in mask]
    branch.rl_weights = [rl_weight if s else 0.0 for s in mask]
    branch.ce_weights = [0.0] * len(mask)
    branch.ref_kl_weights = [0.0] * len(mask)
