"""The taskset authoring kit: everything a taskset needs besides its own task logic.

A third-party taskset depends on ``prl-core`` alone. It subclasses
:class:`prl.contracts.Taskset` and, in its rollout, uses:

* :class:`Conversation` — one agent's messages, sampled turn by turn through the inference
  client and recorded as training branches of the exact token ids, sampled mask and
  logprobs the server returned (:mod:`prl.tasks.conversation`); :func:`episode_trace`
  turns finished conversations into the scored :class:`prl.types.Trace`; the lower-level
  branch writers are in :mod:`prl.tasks.branches`;
* answer extractors — ``\\boxed{}``, ``<answer>`` tags, think stripping, last number,
  final line, GSM8K ``####`` (:mod:`prl.tasks.answers`);
* scoring helpers — LCS ratio, exact / numeric match, token F1, each a reward in [0, 1]
  (:mod:`prl.tasks.scoring`).

:mod:`prl.tasks.testing` has a byte-level renderer and a scripted client for unit tests
of a taskset without a model. Nothing here imports torch.
"""

from prl.tasks.answers import (
    extract_answer,
    extract_boxed,
    extract_hash_answer,
    extract_tag,
    final_line,
    last_int,
    last_number,
    parse_number,
    strip_think,
)
from prl.tasks.branches import add_observation, add_sampled, check_branch, copy_branch, start_branch
from prl.tasks.conversation import Conversation, episode_trace, with_default_max_tokens
from prl.tasks.scoring import exact_match, lcs_length, lcs_ratio, normalize_text, numeric_match, token_f1

__all__ = [
    "Conversation",
    "add_observation",
    "add_sampled",
    "check_branch",
    "copy_branch",
    "episode_trace",
    "exact_match",
    "extract_answer",
    "extract_boxed",
    "extract_hash_answer",
    "extract_tag",
    "final_line",
    "last_int",
    "last_number",
    "lcs_length",
    "lcs_ratio",
    "normalize_text",
    "numeric_match",
    "parse_number",
    "start_branch",
    "strip_think",
    "token_f1",
    "with_default_max_tokens",
]
