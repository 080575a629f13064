"""Scoring helpers shared by the builtin tasksets: answer extraction here, and core's
``lcs_ratio`` (:mod:`prl.scoring`) re-exported for them."""

from __future__ import annotations

import re

from prl.scoring import lcs_ratio

__all__ = ["extract_answer", "last_int", "lcs_ratio"]

_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL)


def extract_answer(text: str) -> str:
    """The text inside the last ``<answer>…</answer>`` tag, else the whole text, stripped."""
    found = _ANSWER.findall(text)
    return (found[-1] if found else text).strip()


_INT = re.compile(r"-?\d+")


def last_int(text: str) -> int | None:
    found = _INT.findall(text.replace(",", ""))
    return int(found[-1]) if found else None
