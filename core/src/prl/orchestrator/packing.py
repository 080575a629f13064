"""Packing training samples into per-rank micro-batches.

1. **First-fit decreasing.** Samples are sorted by length, longest first, and each goes
   into the first micro-batch with room for it (capacity ``seq_len`` tokens); a new
   micro-batch is opened when none has room. FFD uses at most 11/9·OPT + 1 bins.
2. **Balancing.** Each micro-batch has an estimated cost ``Σ L_i + Σ L_i² / seq_len``
   (dense FLOPs grow with tokens, attention with the square of each document's length;
   documents never attend across each other). Every rank gets the same number of
   micro-batches, ``m = ceil(n / ranks)`` (data-parallel ranks step in lockstep), and
   micro-batches go, costliest first, to the cheapest rank that still has a free slot.
3. **Dummies.** A rank left with fewer than ``m`` micro-batches is topped up with one-token
   dummy micro-batches whose loss mask is all false, so every rank runs the same number of
   forward/backward passes even when it has no real data.

A micro-batch is a flat concatenation of its documents: token-aligned lists (``input_ids``,
``position_ids`` restarting at 0 for each document, ``loss_mask``, ``advantages``,
``inference_logprobs``, ``temperatures``, ``rl_weights``, ``ce_weights``,
``ref_kl_weights``, optional ``ref_logprobs``, optional ``sampling_mask`` /
``sampling_mask_logprobs``: per token a list, empty where sampling did not truncate,
optional ``routed_experts``: per token its layers x top_k expert ids, flat, empty where
none were recorded) and per-document lists (``seq_lens``,
``env_names``, ``trace_ids``, ``branch_indices``, optional ``images``: each document's image
URLs, empty for a text one, present when any document has images).
"""

from __future__ import annotations

import math
from typing import Any

from prl.types import TrainingSample


def first_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped into bins of total length <= ``capacity``."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    bins: list[list[int]] = []
    free: list[int] = []
    for i in order:
        size = lengths[i]
        if size > capacity:
            raise ValueError(f"sample of {size} tokens exceeds seq_len {capacity}")
        for b, room in enumerate(free):
            if size <= room:
                bins[b].append(i)
                free[b] -= size
                break
        else:
            bins.append([i])
            free.append(capacity - size)
    return bins


def bin_cost(lengths: list[int], seq_len: int) -> float:
    return sum(lengths) + sum(n * n for n in lengths) / seq_len


def balance(costs: list[float], ranks: int) -> list[list[int]]:
    """Spread bins over ``ranks`` with equal counts, greedily equalising total cost."""
    per_rank = math.ceil(len(costs) / ranks)
    totals = [0.0] * ranks
    out: list[list[int]] = [[] for _ in range(ranks)]
    for b in sorted(range(len(costs)), key=lambda i: -costs[i]):
        open_ranks = [r for r in range(ranks) if len(out[r]) < per_rank]
        r = min(open_ranks, key=lambda k: (totals[k], k))
        out[r].append(b)
        totals[r] += costs[b]
    return out


def micro_batch(samples: list[TrainingSample]) -> dict[str, Any]:
    """Concatenate ``samples`` into one micro-batch dict (see module docstring)."""
    mb: dict[str, Any] = {
        "input_ids": [], "position_ids": [], "loss_mask": [], "advantages": [], "inference_logprobs": [],
        "temperatures": [], "rl_weights": [], "ce_weights": [], "ref_kl_weights": [],
        "seq_lens": [], "env_names": [], "trace_ids": [], "branch_indices": [],
    }  # fmt: skip
    with_ref = any(s.ref_logprobs is not None for s in samples)
    if with_ref:
        mb["ref_logprobs"] = []
    # sampling replay: one kept-id list per token ([] where untruncated) when any sample has them
    with_masks = any(s.sampling_mask is not None for s in samples)
    if with_masks:
        mb["sampling_mask"], mb["sampling_mask_logprobs"] = [], []
    # routing replay: one flat expert-id list per token ([] where none was recorded)
    with_routes = any(s.routed_experts is not None for s in samples)
    if with_routes:
        mb["routed_experts"] = []
    # vision-language prompts: per document its images ([] for a text one) when any has some
    with_images = any(s.images for s in samples)
    if with_images:
        mb["images"] = []
    for s in samples:
        n = len(s.input_ids)
        mb["input_ids"] += s.input_ids
        mb["position_ids"] += range(n)
        mb["loss_mask"] += s.loss_mask
        mb["advantages"] += s.advantages
        mb["inference_logprobs"] += s.inference_logprobs
        mb["temperatures"] += [s.temperature] * n
        mb["rl_weights"] += s.rl_weights
        mb["ce_weights"] += s.ce_weights
        mb["ref_kl_weights"] += s.ref_kl_weights
        if with_ref:
            mb["ref_logprobs"] += s.ref_logprobs if s.ref_logprobs is not None else [0.0] * n
        if with_masks:
            mb["sampling_mask"] += s.sampling_mask if s.sampling_mask is not None else [[]] * n
            lps = s.sampling_mask_logprobs
            mb["sampling_mask_logprobs"] += lps if lps is not None else [[]] * n
        if with_routes:
            mb["routed_experts"] += s.routed_experts if s.routed_experts is not None else [[]] * n
        if with_images:
            mb["images"].append(list(s.images or []))
        mb["seq_lens"].append(n)
        mb["env_names"].append(s.env_name)
        mb["trace_ids"].append(s.trace_id)
        mb["branch_indices"].append(s.branch_index)
    return mb


def dummy_micro_batch() -> dict[str, Any]:
    """One padding token that trains nothing (loss mask false, all weights 0)."""
    pad = TrainingSample([0], [False], [0.0], [0.0], 1.0, [0.0], [0.0], [0.0], env_name="", branch_index=-1)
    return micro_batch([pad])


def pack(samples: list[TrainingSample], seq_len: int, ranks: int) -> list[list[dict[str, Any]]]:
    """Pack ``samples`` into micro-batches of <= ``seq_len`` tokens for each of ``ranks`` ranks."""
    lengths = [len(s.input_ids) for s in samples]
    bins = first_fit_decreasing(lengths, seq_len)
    costs = [bin_cost([lengths[i] for i in b], seq_len) for b in bins]
    assignment = balance(costs, ranks)
    per_rank = max(len(a) for a in assignment) or 1  # with no samples, one dummy each
    out = []
    for rank_bins in assignment:
        mbs = [micro_batch([samples[i] for i in bins[b]]) for b in rank_bins]
        mbs += [dummy_micro_batch() for _ in range(per_rank - len(mbs))]
        out.append(mbs)
    return out
