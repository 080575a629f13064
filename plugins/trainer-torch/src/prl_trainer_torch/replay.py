"""Sampling replay: trainer log-probabilities renormalised over the sampler's kept set.

When the sampler truncates (``top_p < 1`` or ``top_k``), it draws token x_i from

    q_S(v) = q(v) / Σ_{u∈S_i} q(u)   for v in S_i (the ``sampling_mask`` of token i), else 0

so the importance ratio is only meaningful against the trainer's distribution truncated to
the same set. For a token with a mask the trainer therefore uses

    log p_S(v) = z(v) − logsumexp_{u∈S_i} z(u),   z = W h_{i−1} / tau_i

for every v in S_i (``trainer_mask_logprobs``, what IPO's score centering reads) and
log p_S(x_i) as the token's logprob. Tokens without a mask keep the untruncated logprob.

Mask mismatch. The sampler's S_i is the top-|S_i| set of its own distribution. If the
trainer's |S_i| most likely ids (at the same temperature) are not that set, trainer and
sampler disagree about the truncation; that is counted (``mismatch/sampling_mask``, the
fraction of masked tokens), never raised: a stale or numerically different sampler is
expected in async RL. A sampled token outside its own mask counts as a mismatch too, and
keeps its untruncated logprob.

Each chunk's logits are recomputed in the backward (activation checkpointing), so live
memory is one chunk x vocabulary buffer, as in :mod:`prl_trainer_torch.logprobs`.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from prl_trainer_torch.logprobs import chunked_logprobs

NEG_INF = float("-inf")


def pad_masks(masks: list[list[int]] | None, values: list[list[float]] | None = None):
    """(ids [T, K] long, valid [T, K] bool, values [T, K] float or None) from ragged per-token
    lists (an empty list: no mask); None when no token has a mask. Value padding is −inf."""
    if not masks or not any(masks):
        return None
    width = max(len(m) for m in masks)
    ids = torch.zeros(len(masks), width, dtype=torch.long)
    valid = torch.zeros(len(masks), width, dtype=torch.bool)
    vals = torch.full((len(masks), width), NEG_INF) if values is not None else None
    for i, m in enumerate(masks):
        if m:
            ids[i, : len(m)] = torch.tensor(m, dtype=torch.long)
            valid[i, : len(m)] = True
            if vals is not None:
                vals[i, : len(m)] = torch.tensor(values[i][: len(m)], dtype=torch.float32)
    return ids, valid, vals


def _chunk(hidden, weight, ids, valid, inv_temp):
    """(renormalised logprobs over the kept ids [c, K], top-set mismatch [c]) of one chunk."""
    z = (hidden @ weight.t()).float() * inv_temp.unsqueeze(-1)
    kept = z.gather(-1, ids).masked_fill(~valid, NEG_INF)
    out = kept - torch.logsumexp(kept, dim=-1, keepdim=True)
    with torch.no_grad():
        # Every kept set fits in the padded width; a narrower set's extra columns are the
        # sentinel on both sides. (Its widest set in this chunk would be one read of the
        # device, a wait for the GPU, per chunk.)
        width = valid.shape[-1]
        sentinel = z.shape[-1]
        counts = valid.sum(-1, keepdim=True)
        top = z.topk(width, dim=-1).indices
        cols = torch.arange(width, device=z.device).unsqueeze(0)
        top = torch.where(cols < counts, top, sentinel).sort(-1).values
        mine = torch.where(valid, ids, sentinel).sort(-1).values
        mismatch = (top != mine).any(-1)
    return out.masked_fill(~valid, NEG_INF), mismatch


def replay_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    ids: torch.Tensor,
    valid: torch.Tensor,
    temperature: torch.Tensor,
    chunk_size: int,
    rows: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position (flattened over leading dims): log p_S over the kept ids [N, K] (−inf
    padding, −inf on rows without a mask) and the top-set mismatch flags [N] (module
    docstring). Gradients flow to ``hidden`` and ``weight``. ``rows``: the positions with a
    mask, ascending, when the caller found them on the host; without them they are looked
    up on the device, which makes the host wait for the GPU."""
    h = hidden.reshape(-1, hidden.shape[-1])
    ids, valid = ids.reshape(h.shape[0], -1), valid.reshape(h.shape[0], -1)
    inv = (1.0 / temperature.float()).reshape(-1)
    if rows is None:
        rows = valid.any(-1).nonzero().squeeze(-1)
    out = torch.full(ids.shape, NEG_INF, device=h.device, dtype=torch.float32)
    mismatch = torch.zeros(ids.shape[0], dtype=torch.bool, device=h.device)
    pieces, flags = [], []
    for start in range(0, rows.numel(), chunk_size):
        sel = rows[start : start + chunk_size]
        lp, mm = checkpoint(_chunk, h[sel], weight, ids[sel], valid[sel], inv[sel], use_reentrant=False)
        pieces.append(lp)
        flags.append(mm)
    if pieces:
        out = out.index_put((rows,), torch.cat(pieces))
        mismatch[rows] = torch.cat(flags)
    return out, mismatch


def replayed_target(
    logp: torch.Tensor, mask_logp: torch.Tensor, ids: torch.Tensor, valid: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp with log p_S(target) wherever the target is in its mask, flags of masked
    positions whose target is outside the mask). Shapes: logp/targets [N], the rest [N, K]."""
    hit = valid & (ids == targets.unsqueeze(-1))
    found = hit.any(-1)
    picked = torch.where(hit, mask_logp, torch.zeros_like(mask_logp)).sum(-1)
    return torch.where(found, picked, logp), valid.any(-1) & ~found


def policy_head(hidden, weight, targets, temperature, chunk_size: int, entropy: bool, replay=None):
    """The policy's outputs from final hidden states: (logp, entropy), and with ``replay =
    (ids, valid)`` ([B, T, K], aligned with ``targets``; or ``(ids, valid, rows)`` with the
    flattened positions that have a mask, see :func:`replay_logprobs`) also the kept-set
    logprobs [B, T, K] and the mask mismatch flags [B, T]; logp is then log p_S(target) where
    the target is in its mask."""
    logp, ent = chunked_logprobs(hidden, weight, targets, temperature, chunk_size, entropy)
    if replay is None:
        return logp, ent
    ids, valid, *rows = replay
    temps = temperature if isinstance(temperature, torch.Tensor) else torch.full_like(logp, float(temperature))
    mask_logp, mismatch = replay_logprobs(hidden, weight, ids, valid, temps.expand_as(logp), chunk_size, *rows)
    width = mask_logp.shape[-1]
    flat, outside = replayed_target(
        logp.reshape(-1), mask_logp, ids.reshape(-1, width), valid.reshape(-1, width), targets.reshape(-1)
    )
    lead = targets.shape
    return flat.reshape(lead), ent, mask_logp.reshape(*lead, width), (mismatch | outside).reshape(lead)
