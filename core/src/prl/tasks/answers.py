"""Answer extraction: pull the part of a reply that a taskset scores.

Extractors return the answer text stripped of surrounding whitespace, or ``None`` when the
reply holds no answer of that shape, so "no answer" can never be confused with an empty
or wrong one. The exception is :func:`extract_answer`, which falls back to the whole reply
(the builtin tasksets ask for a bare answer and accept an ``<answer>`` tag around it).

Typical chains::

    extract_boxed(strip_think(reply))            # math: last \\boxed{...} after reasoning
    extract_tag(reply, "answer")                 # <answer>...</answer> protocols
    last_number(reply)                           # "... so the total is 1,250." -> "1250"
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = [
    "extract_answer",
    "extract_boxed",
    "extract_hash_answer",
    "extract_tag",
    "final_line",
    "last_int",
    "last_number",
    "parse_number",
    "strip_think",
]


def extract_tag(text: str, tag: str = "answer", *, allow_unclosed: bool = True) -> str | None:
    """Content of the last ``<tag>…</tag>``, stripped; None when there is none.

    With ``allow_unclosed`` (the default) a last tag that is never closed runs to the end of
    the text: a reply cut off by ``max_tokens`` after ``<answer>`` still has its answer.
    """
    end = f"(?:</{re.escape(tag)}>|$)" if allow_unclosed else f"</{re.escape(tag)}>"
    found = re.findall(f"<{re.escape(tag)}>(.*?){end}", text, flags=re.DOTALL)
    return found[-1].strip() if found else None


def extract_answer(text: str) -> str:
    """The text inside the last ``<answer>…</answer>`` tag, else the whole text, stripped."""
    tagged = extract_tag(text, "answer")
    return tagged if tagged is not None else text.strip()


def strip_think(text: str) -> str:
    """The reply after its reasoning: the text after the last ``</think>``, stripped.

    A reply that opens ``<think>`` and never closes it was cut off while reasoning, so it
    has no answer: the result is "". A reply without think tags is returned stripped.
    """
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1].strip()
    return "" if "<think>" in text else text.strip()


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOXED_BARE = re.compile(r"\\boxed +([^\s${}]+)")


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{…}`` (or ``\\fbox{…}``), nested braces kept balanced.

    ``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``; the bare form ``\\boxed 5`` gives
    ``5``. A box whose braces never close (a truncated reply) is no answer: None.
    """
    starts = [m.end() for m in _BOXED.finditer(text)]
    bare = list(_BOXED_BARE.finditer(text))
    if bare and (not starts or bare[-1].start() > starts[-1]):
        return bare[-1].group(1).strip()
    for start in reversed(starts):  # the last box that closes wins
        content = _balanced(text, start)
        if content is not None:
            return content.strip()
    return None


def _balanced(text: str, start: int) -> str | None:
    """The text from ``start`` up to the ``}`` closing the ``{`` just before it, or None."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def extract_hash_answer(text: str) -> str | None:
    """GSM8K's answer format: the rest of the line after the last ``####``; None if absent."""
    if "####" not in text:
        return None
    answer = text.rsplit("####", 1)[1].strip().split("\n", 1)[0].strip()
    return answer or None


def final_line(text: str) -> str | None:
    """The last non-blank line, stripped; None for a blank reply."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


# A minus sign counts only where it cannot be a hyphen or a subtraction ("pages 3-5" is 5).
_NUMBER = re.compile(r"(?:(?<![\w)\]])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|(?<!\d)-?\.\d+")


def last_number(text: str) -> str | None:
    """The last number in the text as written, thousands separators removed; None if none.

    ``"It costs $1,250.50."`` gives ``"1250.50"``; ``"x = -3"`` gives ``"-3"``.
    """
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


_INT = re.compile(r"-?\d+")


def last_int(text: str) -> int | None:
    """The last run of digits (with a leading ``-``) after commas are dropped; None if none."""
    found = _INT.findall(text.replace(",", ""))
    return int(found[-1]) if found else None


_FRAC = re.compile(r"^([-+]?)\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}$")
_DECORATION = re.compile(r"\\[!,;: ]|\\\$|\$|\\%|%")
# Digits only: float() alone would also take "nan", "inf" and "1_000".
_PLAIN = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_GROUPED = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_RATIO = re.compile(r"([-+]?\d+(?:\.\d+)?)/([-+]?\d+(?:\.\d+)?)")


def parse_number(text: str) -> float | None:
    """A whole answer read as a number, or None when it is not one.

    Accepts ``1,000``, ``-2.5``, ``1e-3``, ``3/4``, ``\\frac{3}{4}`` (and ``\\dfrac``),
    with ``$``, ``%``, math delimiters and LaTeX thin spaces ignored (``50%`` reads 50:
    answers are compared as written, not converted to fractions of one).
    """
    s = _DECORATION.sub("", text).strip().rstrip(".").strip()
    frac = _FRAC.match(s)
    if frac:
        s = f"{frac.group(1)}{frac.group(2)}/{frac.group(3)}"
    s = re.sub(r"\s*/\s*", "/", s.replace("\u2212", "-"))  # "3 / 4"; U+2212 is a typeset minus
    if "," in s:  # only as thousands separators: "1,2" is a list, not twelve
        if not _GROUPED.fullmatch(s):
            return None
        s = s.replace(",", "")
    if _PLAIN.fullmatch(s):
        return float(s)
    ratio = _RATIO.fullmatch(s)
    if ratio and float(ratio.group(2)) != 0:
        return float(Fraction(ratio.group(1)) / Fraction(ratio.group(2)))
    return None
