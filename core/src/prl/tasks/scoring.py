"""Scoring helpers for task rewards: similarity, exact match, numeric match, token F1.

Every helper returns a float in [0, 1] so it can be a reward as is, and accepts ``None``
for "the model gave no answer" (scored 0.0), so ``exact_match(extract_boxed(reply), x)``
needs no special case.

``lcs_ratio(a, b) = 2·LCS(a, b) / (|a| + |b|)`` where LCS is the length of the longest
common subsequence: 1.0 for identical sequences, 0.0 when nothing is shared (and 1.0 for
two empty ones). It rewards partial answers smoothly, unlike exact match, and works on any
sequences (strings, or lists of lines). Tasksets of every kind (the builtin ones, the
verifiers example) score with it, so their rewards are comparable.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from prl.tasks.answers import parse_number

__all__ = ["exact_match", "lcs_length", "lcs_ratio", "normalize_text", "numeric_match", "token_f1"]


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


def lcs_ratio(a: Sequence | None, b: Sequence) -> float:
    """2·LCS(a, b) / (|a| + |b|); 1.0 for two empty sequences, 0.0 when ``a`` is None."""
    if a is None:
        return 0.0
    if not a and not b:
        return 1.0
    return 2.0 * lcs_length(a, b) / (len(a) + len(b))


_SPACE = re.compile(r"\s+")


def normalize_text(text: str, *, case_sensitive: bool = False) -> str:
    """Whitespace runs collapsed to one space, ends stripped, case folded unless asked not to.

    A trailing period is dropped too: models end sentences with one, answers rarely mean it.
    """
    text = _SPACE.sub(" ", text).strip().removesuffix(".").rstrip()
    return text if case_sensitive else text.casefold()


def exact_match(prediction: str | None, target: str, *, case_sensitive: bool = False, normalize: bool = True) -> float:
    """1.0 when ``prediction`` equals ``target`` (after :func:`normalize_text` unless
    ``normalize=False``), else 0.0."""
    if prediction is None:
        return 0.0
    if normalize:
        prediction = normalize_text(prediction, case_sensitive=case_sensitive)
        target = normalize_text(target, case_sensitive=case_sensitive)
    elif not case_sensitive:
        prediction, target = prediction.casefold(), target.casefold()
    return float(prediction == target)


def numeric_match(
    prediction: str | float | None, target: str | float, *, rel_tol: float = 1e-6, abs_tol: float = 1e-9
) -> float:
    """1.0 when both parse as numbers (:func:`prl.tasks.answers.parse_number`: ``1,000``,
    ``-2.5``, ``3/4``, ``\\frac{3}{4}``, ``50%``, ``$12``) that agree within the tolerances."""
    if prediction is None:
        return 0.0
    got, want = _as_number(prediction), _as_number(target)
    if got is None or want is None:
        return 0.0
    return float(math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol))


def _as_number(value: str | float) -> float | None:
    if isinstance(value, bool):  # bool is an int subclass but never a numeric answer
        return None
    return float(value) if isinstance(value, int | float) else parse_number(value)


def token_f1(prediction: str | None, target: str) -> float:
    """SQuAD-style F1 over whitespace tokens of the normalised texts (bag of words)."""
    if prediction is None:
        return 0.0
    got = normalize_text(prediction).split()
    want = normalize_text(target).split()
    if not got or not want:
        return float(got == want)
    common = sum((Counter(got) & Counter(want)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(got), common / len(want)
    return 2 * precision * recall / (precision + recall)
