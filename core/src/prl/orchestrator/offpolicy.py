"""Off-policy control: which weights versions may still feed a batch, and how far ahead to sample.

Batch ``S`` trains on version ``S - 1``; a trace sampled on version ``V`` is ``(S - 1) - V``
steps off-policy for it. These rules are pure so the loop, the buffer and their tests share
one statement of them.
"""

from __future__ import annotations


def lag(step: int, version: int) -> int:
    """Steps off-policy of a trace sampled on ``version`` when it trains in batch ``step``."""
    return step - 1 - version


def oldest_usable(step: int, max_off_policy_steps: int) -> int:
    """The oldest dispatch version whose traces batch ``step`` still accepts."""
    return step - 1 - max_off_policy_steps


def may_dispatch(step: int, version: int, max_off_policy_steps: int) -> bool:
    """Whether groups dispatched on ``version`` now can still be used for batch ``step``.

    Inference may run at most one update behind the trainer's next input (``V >= S - 2``):
    sampling further behind would only fill the buffer with traces the next weight update
    makes stale.
    """
    return lag(step, version) <= 1 and version >= oldest_usable(step, max_off_policy_steps)


def dispatch_budget(step: int, version: int, max_off_policy_steps: int, batch_size: int) -> int:
    """Traces to keep buffered or in flight: this batch, plus the next when it may start.

    The next batch (``S + 1``) may be collected early only when traces of ``version`` will
    still be usable then, i.e. ``version >= S - max_off_policy_steps``, and inference is
    already serving the weights batch ``S`` trains on.
    """
    ahead = version >= step - 1 and version >= oldest_usable(step + 1, max_off_policy_steps)
    return batch_size * (2 if ahead else 1)
