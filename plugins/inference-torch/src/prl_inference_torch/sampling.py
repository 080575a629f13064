"""Batched sampling with per-row temperature, top-k, top-p and seeds.

For row r with logits z and temperature T > 0 the reported logprob of token t is
``log softmax(z / T)[t]``: the temperature-scaled distribution *before* top-k / top-p
truncation, which is what the trainer recomputes when it divides its logits by the
sampling temperature. T = 0 means greedy; its logprobs are those of ``softmax(z)``.

Sampling itself draws from the truncated, renormalised distribution p with the
exponential race: ``argmax_t p_t / E_t`` with ``E_t ~ Exp(1)`` i.i.d. picks t with
probability p_t. The noise of a seeded row comes from that row's own generator, so the same
seed and prompt give the same tokens whatever else is in the batch.

For a row whose top-k / top-p truncation is active, ``kept`` lists the token ids it could
have sampled (the "sampling mask" of ``docs/algorithms.md``) so the trainer can renormalise its
logprobs over the same set, and ``kept_logprobs`` their untruncated logprobs (the trainer
renormalises those too, for the sampled token's ratio and IPO's score centering).
A row's ``cap`` (the server's ``mask_top_k`` on generate requests with top_p alone) keeps
only the cap most likely ids of its nucleus, so those lists stay short.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RowSampling:
    temperature: float
    top_p: float
    top_k: int  # 0: off
    generator: torch.Generator | None
    masks: bool = True  # report the kept ids of a truncated row (Sampled.kept)
    cap: int = 0  # keep at most this many of the top_p nucleus's most likely ids (0: all)


@dataclass
class Sampled:
    tokens: torch.Tensor  # [B]
    logprobs: torch.Tensor  # [B]
    ranks: torch.Tensor  # [B], 1 = most likely
    top_ids: torch.Tensor | None  # [B, k]
    top_logprobs: torch.Tensor | None  # [B, k]
    kept: list[list[int] | None] | None = None  # per row: ids left by truncation (None: untruncated)
    kept_logprobs: list[list[float] | None] | None = None  # per row: log softmax(z / T) of those ids


def sample(logits: torch.Tensor, rows: list[RowSampling], generator: torch.Generator, top_n: int = 0) -> Sampled:
    """Sample one token per row of ``logits`` [B, V]; ``top_n`` alternatives per row when > 0."""
    logits = logits.float()
    device = logits.device
    temps = torch.tensor([r.temperature for r in rows], device=device)
    greedy = temps == 0
    logp = torch.log_softmax(logits / torch.where(greedy, 1.0, temps)[:, None], dim=-1)
    filtered = _truncate(logp, rows)
    noise = torch.empty_like(filtered).exponential_(generator=generator)
    for i, row in enumerate(rows):
        if row.generator is not None:
            noise[i].exponential_(generator=row.generator)
    drawn = (filtered.exp() / noise).argmax(-1)
    tokens = torch.where(greedy, logp.argmax(-1), drawn)
    chosen = logp.gather(1, tokens[:, None])
    ranks = (logp > chosen).sum(-1) + 1
    top_ids = top_lp = None
    if top_n > 0:
        top_lp, top_ids = logp.topk(min(top_n, logp.shape[-1]), dim=-1)
    kept = kept_lp = None
    if filtered is not logp:
        kept, kept_lp = [], []
        for i, r in enumerate(rows):
            wanted = r.masks and _truncates(r) and not bool(greedy[i])
            ids = (filtered[i] > float("-inf")).nonzero()[:, 0] if wanted else None
            kept.append(ids.tolist() if ids is not None else None)
            # the untruncated logprobs of the kept ids: the trainer renormalises them (replay)
            kept_lp.append(logp[i, ids].tolist() if ids is not None else None)
    return Sampled(tokens, chosen[:, 0], ranks, top_ids, top_lp, kept, kept_lp)


def _truncates(row: RowSampling) -> bool:
    return row.top_k > 0 or row.top_p < 1.0


def _truncate(logp: torch.Tensor, rows: list[RowSampling]) -> torch.Tensor:
    """Set tokens outside each row's top-k / top-p set to -inf (the argmax always stays),
    then, where a row has a ``cap``, all but the cap most likely ids left."""
    ks = [r.top_k for r in rows]
    ps = [r.top_p for r in rows]
    if not any(ks) and all(p >= 1.0 for p in ps):
        return logp
    out = _top_k_top_p(logp, ks, ps)
    caps = [r.cap for r in rows]
    if any(caps):
        # The nucleus is a prefix of the sorted order, so this keeps its first `cap` ids:
        # a nucleus within the cap is sampled exactly as without it.
        vocab = logp.shape[-1]
        c = torch.tensor([k if 0 < k < vocab else vocab for k in caps], device=logp.device)
        kth = out.topk(int(c.max()), dim=-1).values.gather(1, (c - 1)[:, None])
        out = out.masked_fill(out < kth, float("-inf"))
    return out


def _top_k_top_p(logp: torch.Tensor, ks: list[int], ps: list[float]) -> torch.Tensor:
    out = logp.clone()
    vocab = logp.shape[-1]
    if any(ks):
        k = torch.tensor([k if 0 < k < vocab else vocab for k in ks], device=logp.device)
        kth = logp.topk(int(k.max()), dim=-1).values.gather(1, (k - 1)[:, None])
        out = out.masked_fill(logp < kth, float("-inf"))
    if any(p < 1.0 for p in ps):
        p = torch.tensor(ps, device=logp.device)[:, None]
        sorted_lp, order = out.sort(dim=-1, descending=True)
        probs = sorted_lp.softmax(-1)
        # drop a token when the mass before it already reaches top_p
        drop = (probs.cumsum(-1) - probs) >= p
        drop[:, 0] = False
        out = out.scatter(1, order, sorted_lp.masked_fill(drop, float("-inf")))
    return out


def prompt_logprobs(logits: torch.Tensor, ids: torch.Tensor, top_n: int) -> list[dict[int, tuple[float, int]] | None]:
    """Logprob (and rank) of every prompt token given the tokens before it; None for the first.

    ``logits`` [L, V] are the raw (temperature 1) logits of one unpadded prompt ``ids`` [L].
    Each entry maps token id to (logprob, rank): the prompt's own token plus ``top_n`` others.
    """
    logp = torch.log_softmax(logits[:-1].float(), dim=-1)
    target = ids[1:]
    chosen = logp.gather(1, target[:, None])
    ranks = ((logp > chosen).sum(-1) + 1).tolist()
    chosen_l = chosen[:, 0].tolist()
    tops = logp.topk(top_n, dim=-1) if top_n > 0 else None
    out: list[dict[int, tuple[float, int]] | None] = [None]
    for i, tok in enumerate(target.tolist()):
        entry = {tok: (chosen_l[i], ranks[i])}
        if tops is not None:
            for rank, (lp, t) in enumerate(zip(tops.values[i].tolist(), tops.indices[i].tolist(), strict=False), 1):
                entry.setdefault(t, (lp, rank))
        out.append(entry)
    return out
