"""Per-token log-probabilities and entropy from hidden states, chunked over the sequence.

For hidden states ``h_t`` (T x d), the output matrix ``W`` (V x d) and a per-token sampling
temperature ``tau_t`` the trainer needs, for every position t and its target token y_t,

    z_t = W h_t / tau_t
    logp_t = z_t[y_t] - logsumexp(z_t)
    H_t = logsumexp(z_t) - sum_v softmax(z_t)_v z_t[v]

The full logits are T x V floats (16k tokens x 152k vocab = 9.3 GiB in fp32), so they are
never built for a whole micro-batch: the sequence is cut into chunks of ``chunk_size``
tokens and each chunk is run under activation checkpointing, which keeps only the chunk's
hidden states for the backward pass and recomputes its logits there. Peak memory is then
one chunk's logits (chunk_size x V) instead of T x V. The softmax runs in float32.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

DEFAULT_CHUNK = 1024


def _chunk_stats(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, inv_temp: torch.Tensor, want_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = (hidden @ weight.t()).float() * inv_temp.unsqueeze(-1)
    lse = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    logp = picked - lse
    if want_entropy:
        probs = torch.softmax(logits, dim=-1)
        entropy = lse - (probs * logits).sum(-1)
    else:
        entropy = torch.zeros_like(logp)
    return logp, entropy


_compiled: dict[str, object] = {}


def compile_chunks() -> None:
    """Fuse each chunk's cast/scale/logsumexp/softmax into few kernels. Opt-in: not yet
    measured on GPU (a benchmark run with it did not finish compiling in 5 minutes)."""
    _compiled["fn"] = torch.compile(_chunk_stats, dynamic=False)


def chunked_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: torch.Tensor | float = 1.0,
    chunk_size: int = DEFAULT_CHUNK,
    entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of ``targets`` and (optionally) entropies, both shaped like targets.

    ``hidden`` is (..., T, d), ``targets`` (..., T) integer ids (any valid id where masked),
    ``temperature`` a float or a (..., T) tensor. Gradients flow to ``hidden`` and ``weight``.
    """
    lead = targets.shape
    h = hidden.reshape(-1, hidden.shape[-1])
    y = targets.reshape(-1)
    if isinstance(temperature, torch.Tensor):
        inv = (1.0 / temperature.float()).reshape(-1).expand(y.shape[0])
    else:
        inv = torch.full((y.shape[0],), 1.0 / float(temperature), device=h.device)
    fn = _compiled.get("fn", _chunk_stats)
    logps, ents = [], []
    needs_grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    for start in range(0, y.shape[0], chunk_size):
        sl = slice(start, start + chunk_size)
        if needs_grad:
            lp, en = checkpoint(fn, h[sl], weight, y[sl], inv[sl], entropy, use_reentrant=False)
        else:
            lp, en = fn(h[sl], weight, y[sl], inv[sl], entropy)
        logps.append(lp)
        ents.append(en)
    return torch.cat(logps).reshape(lead), torch.cat(ents).reshape(lead)
