"""vf-reverse-text: a verifiers v1 taskset — reverse a text character by character.

Installed as the importable package ``vf_reverse_text``, so verifiers resolves the taskset
id ``vf-reverse-text`` to it like any other installed taskset package. Offline: rows come
from a local JSONL file (``data_path``; one ``{"text": ...}`` object per line) or, when no
file is given, from a seeded generator (train seed ``2·seed``, eval ``2·seed + 1``).

Reward: ``lcs_ratio(answer, reversed(text)) = 2·LCS / (|answer| + |text|)``, where the
answer is the stripped reply or the content of its ``<answer>`` tag, scored with
:mod:`prl.tasks` exactly as the builtin ``reverse-text`` scores, so the two are comparable.
"""

from vf_reverse_text.taskset import ReverseTextTaskset

__all__ = ["ReverseTextTaskset"]
