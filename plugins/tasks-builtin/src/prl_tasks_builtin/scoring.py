"""Scoring helpers shared by the builtin tasksets.

``lcs_ratio(a, b) = 2·LCS(a, b) / (|a| + |b|)`` where LCS is the length of the longest
common subsequence: 1.0 for identical strings, 0.0 when nothing is shared (and 1.0 for two
empty strings). It rewards partial reversals smoothly, unlike exact match. Both work on any sequences
(strings, or lists of lines).
"""

from __future__ import annotations

import re
from collections.abc import Sequence


def lcs_length(a: Sequence, b: Sequence) -> int:
    """Longest common subsequence length, O(|a|·|b|) time and O(|b|) memory."""
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
    if not a and not b:
        return 1.0
    return 2.0 * lcs_length(a, b) / (len(a) + len(b))


_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL)


def extract_answer(text: str) -> str:
    """The text inside the last ``<answer>…</answer>`` tag, else the whole text, stripped."""
    found = _ANSWER.findall(text)
    return (found[-1] if found else text).strip()


_INT = re.compile(r"-?\d+")


def last_int(text: str) -> int | None:
    found = _INT.findall(text.replace(",", ""))
    return int(found[-1]) if found else None
