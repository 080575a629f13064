"""Scored traces to training samples.

Each branch of a trace becomes one :class:`prl.types.TrainingSample` (one packed document):

* ``rl_weights`` default to 1 on sampled tokens and 0 elsewhere when the algorithm left them
  unset; ``ce_weights`` and ``ref_kl_weights`` default to 0; ``advantages`` to 0.
* ``min_abs_advantage`` (m): an rl token with ``|A| <= m`` leaves the rl loss (its rl weight
  becomes 0). With the default m = 0 this removes exactly the zero-advantage tokens, e.g. a
  GRPO group whose rewards are all equal.
* ``loss_mask`` marks tokens with any non-zero weight. A sample with no rl, ce or ref_kl
  signal left is useless and is dropped; a trace is useful when one of its samples is.
* A sample longer than ``seq_len`` is cut to ``seq_len`` tokens (the tail is lost; counted).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

from prl.types import Branch, Trace, TrainingSample

ALIGNED = (
    "sampled_mask", "logprobs", "advantages", "rl_weights", "ce_weights", "ref_kl_weights", "ref_logprobs",
    "sampling_mask", "sampling_mask_logprobs", "routed_experts",
)  # fmt: skip
SAMPLE_LISTS = (
    "input_ids", "loss_mask", "advantages", "inference_logprobs", "rl_weights", "ce_weights", "ref_kl_weights",
)  # fmt: skip


class MalformedTrace(ValueError):
    """A branch whose token-aligned lists disagree in length."""


@dataclass
class TraceSamples:
    """The samples a trace turned into, with what the batch accounting needs."""

    trace: Trace
    samples: list[TrainingSample] = field(default_factory=list)
    overlong: int = 0

    @property
    def useful(self) -> bool:
        return bool(self.samples)


def _check(branch: Branch, name: str, values: list | None) -> None:
    if values is not None and len(values) != len(branch.token_ids):
        raise MalformedTrace(f"branch.{name} has {len(values)} entries for {len(branch.token_ids)} tokens")


def branch_to_sample(trace: Trace, index: int, branch: Branch, min_abs_advantage: float) -> TrainingSample:
    n = len(branch.token_ids)
    for name in ALIGNED:
        _check(branch, name, getattr(branch, name))
    # Lists are shared with the branch, not copied: nothing downstream mutates them, and
    # this conversion runs once per episode on the orchestrator's hot path.
    adv = branch.advantages if branch.advantages is not None else [0.0] * n
    rl = branch.rl_weights if branch.rl_weights is not None else list(map(float, branch.sampled_mask))
    ce = branch.ce_weights if branch.ce_weights is not None else [0.0] * n
    kl = branch.ref_kl_weights if branch.ref_kl_weights is not None else [0.0] * n
    if min_abs_advantage == 0.0:
        rl = list(map(operator.mul, rl, map(bool, adv)))  # w * (A != 0)
    else:
        rl = [w if abs(a) > min_abs_advantage else 0.0 for w, a in zip(rl, adv, strict=False)]
    if any(ce) or any(kl):
        mask = [bool(a or b or c) for a, b, c in zip(rl, ce, kl, strict=False)]
    else:
        mask = list(map(bool, rl))
    return TrainingSample(
        input_ids=branch.token_ids,
        loss_mask=mask,
        advantages=adv,
        inference_logprobs=branch.logprobs,
        temperature=float(branch.temperature),
        rl_weights=rl,
        ce_weights=ce,
        ref_kl_weights=kl,
        env_name=trace.env,
        trace_id=trace.trace_id,
        branch_index=index,
        ref_logprobs=branch.ref_logprobs,
        sampling_mask=branch.sampling_mask,
        sampling_mask_logprobs=branch.sampling_mask_logprobs,
        routed_experts=branch.routed_experts,
        images=branch.images,
    )


def _truncate(sample: TrainingSample, seq_len: int) -> None:
    for name in SAMPLE_LISTS:
        setattr(sample, name, getattr(sample, name)[:seq_len])
    for name in ("ref_logprobs", "sampling_mask", "sampling_mask_logprobs", "routed_experts"):
        if getattr(sample, name) is not None:
            setattr(sample, name, getattr(sample, name)[:seq_len])


def trace_to_samples(trace: Trace, seq_len: int, min_abs_advantage: float = 0.0) -> TraceSamples:
    """Convert every branch; keep only samples with some training signal (see module doc)."""
    out = TraceSamples(trace)
    if not trace.ok:
        return out
    for index, branch in enumerate(trace.branches):
        if not branch.token_ids:
            continue
        sample = branch_to_sample(trace, index, branch, min_abs_advantage)
        if len(sample.input_ids) > seq_len:
            _truncate(sample, seq_len)
            out.overlong += 1
        if any(sample.loss_mask):
            out.samples.append(sample)
    return out


def is_empty(trace: Trace) -> bool:
    """An ok trace in which the policy sampled no token at all."""
    return trace.ok and not any(any(b.sampled_mask) for b in trace.branches)
