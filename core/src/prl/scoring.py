"""Sequence similarity for task rewards.

``lcs_ratio(a, b) = 2·LCS(a, b) / (|a| + |b|)`` where LCS is the length of the longest
common subsequence: 1.0 for identical sequences, 0.0 when nothing is shared (and 1.0 for
two empty ones). It rewards partial answers smoothly, unlike exact match, and works on any
sequences (strings, or lists of lines). Tasksets of every kind (the builtin ones, the
verifiers example) score with it, so their rewards are comparable.
"""

from __future__ import annotations

from collections.abc import Sequence


def lcs_length(a: Sequence, b: Sequence) -> int:
    """Longest common subsequence length, O(|a|·|b|) time and O(min(|a|, |b|)) memory."""
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b, start=1):
            cur.append(prev[j - 1] + 1 if ca == cb else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]


def lcs_ratio(a: Sequence, b: Sequence) -> float:
    """2·LCS(a, b) / (|a| + |b|); 1.0 for two empty sequences."""
    if not a and not b:
        return 1.0
    return 2.0 * lcs_length(a, b) / (len(a) + len(b))
