"""Per-token log-probabilities and entropy from hidden states, chunked over the sequence.

For hidden states ``h_t`` (T x d), the output matrix ``W`` (V x d) and a per-token sampling
temperature ``tau_t`` the trainer needs, for every position t and its target token y_t,

    z_t = W h_t / tau_t,   lse_t = logsumexp(z_t),   p_t = softmax(z_t)
    logp_t = z_t[y_t] - lse_t
    H_t = lse_t - sum_v p_t[v] z_t[v]

The full logits are T x V floats (16k tokens x 152k vocab = 9.3 GiB in fp32), so they are
never built for a whole micro-batch. A custom autograd function walks the sequence in
chunks of ``chunk_size`` tokens: the forward keeps only three floats per token (logp, lse,
H); the backward recomputes one chunk's logits at a time and turns them, in place, into
the gradient with respect to the logits,

    dL/dz_t = g_logp_t * (onehot(y_t) - p_t) - g_H_t * p_t * (log p_t + H_t)

then multiplies back through ``W``. Live memory is about two fp32 chunk x V buffers, and
the per-chunk arithmetic (``_chunk_forward``/``_chunk_grad``) is pure tensor code that
``compile_chunks`` hands to torch.compile, which fuses it into a couple of passes over the
bf16 logits. The softmax always runs in float32.
"""

from __future__ import annotations

import torch

DEFAULT_CHUNK = 2048


def _chunk_forward(
    logits: torch.Tensor, targets: torch.Tensor, inv_temp: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logp, lse, entropy) of one chunk from its raw (unscaled) logits."""
    z = logits.float().mul_(inv_temp.unsqueeze(-1))
    lse = torch.logsumexp(z, dim=-1)
    logp = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    probs = torch.sub(z, lse.unsqueeze(-1)).exp_()
    return logp, lse, lse - (probs * z).sum(-1)


def _chunk_grad(
    logits: torch.Tensor,
    targets: torch.Tensor,
    inv_temp: torch.Tensor,
    lse: torch.Tensor,
    entropy: torch.Tensor,
    g_logp: torch.Tensor,
    g_ent: torch.Tensor,
) -> torch.Tensor:
    """Gradient of the loss with respect to one chunk's raw logits, in the logits' dtype.
    In place on one fp32 buffer (plus the probabilities): eager mode would otherwise hold
    several chunk x V temporaries; compiled, it is one fused pass either way."""
    inv = inv_temp.unsqueeze(-1)
    grad = logits.float().mul_(inv).sub_(lse.unsqueeze(-1))  # log p
    probs = grad.exp()
    grad.add_(entropy.unsqueeze(-1)).mul_(probs).mul_(-g_ent.unsqueeze(-1))
    grad.addcmul_(probs, g_logp.unsqueeze(-1), value=-1.0)
    del probs
    grad.scatter_add_(-1, targets.unsqueeze(-1), g_logp.unsqueeze(-1))
    return grad.mul_(inv).to(logits.dtype)


_KERNELS: dict[str, object] = {"forward": _chunk_forward, "grad": _chunk_grad}


def compile_chunks() -> None:
    """Use torch.compile'd per-chunk kernels (GPU): one fused reduction for the forward
    statistics and one fused pointwise pass for the logit gradient."""
    # Automatic dynamic shapes: full chunks keep their static kernel, and the first
    # different tail size compiles one dynamic kernel that serves every later tail.
    _KERNELS["forward"] = torch.compile(_chunk_forward)
    _KERNELS["grad"] = torch.compile(_chunk_grad)


def _piece(t: torch.Tensor, sl: slice) -> torch.Tensor:
    # A fresh copy of a per-token slice (chunk floats): a view would carry its storage
    # offset into torch.compile's guards and recompile the kernels for every position.
    return t[sl].clone()


class _ChunkedLogprobs(torch.autograd.Function):
    """(logp, entropy) of flattened tokens; the backward recomputes logits chunk by chunk
    (module docstring). Saves only the inputs and two floats per token."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, inv_temp, chunk_size):
        n = targets.shape[0]
        logp = torch.empty(n, device=hidden.device, dtype=torch.float32)
        lse, ent = torch.empty_like(logp), torch.empty_like(logp)
        for start in range(0, n, chunk_size):
            sl = slice(start, start + chunk_size)
            logits = hidden[sl] @ weight.t()
            logp[sl], lse[sl], ent[sl] = _KERNELS["forward"](logits, _piece(targets, sl), _piece(inv_temp, sl))
        ctx.save_for_backward(hidden, weight, targets, inv_temp, lse, ent)
        ctx.chunk_size = chunk_size
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, g_ent):
        hidden, weight, targets, inv_temp, lse, ent = ctx.saved_tensors
        n = targets.shape[0]
        # Autograd hands an unused output's gradient over as zeros (materialised), never None.
        g_logp, g_ent = g_logp.float(), g_ent.float()
        grad_h = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        # Accumulate W's gradient over chunks in fp32; one rounding to its dtype at the end.
        grad_w = (
            torch.zeros(weight.shape, device=weight.device, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        )
        for start in range(0, n, ctx.chunk_size):
            sl = slice(start, start + ctx.chunk_size)
            logits = hidden[sl] @ weight.t()
            pieces = (_piece(t, sl) for t in (targets, inv_temp, lse, ent, g_logp, g_ent))
            g = _KERNELS["grad"](logits, *pieces)
            del logits
            if grad_h is not None:
                torch.matmul(g, weight, out=grad_h[sl])
            if grad_w is not None:
                if g.dtype == grad_w.dtype:
                    grad_w.addmm_(g.t(), hidden[sl])
                else:
                    grad_w.add_(g.t() @ hidden[sl])
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        return grad_h, grad_w, None, None, None


def chunked_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: torch.Tensor | float = 1.0,
    chunk_size: int = DEFAULT_CHUNK,
    entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of ``targets`` and entropies (zeros unless ``entropy``), both
    shaped like ``targets`` and float32.

    ``hidden`` is (..., T, d), ``targets`` (..., T) integer ids (any valid id where masked),
    ``temperature`` a float or a (..., T) tensor. Gradients flow to ``hidden`` and ``weight``.
    The entropy is computed either way (it costs one extra product in the same pass).
    """
    lead = targets.shape
    h = hidden.reshape(-1, hidden.shape[-1])
    y = targets.reshape(-1)
    if isinstance(temperature, torch.Tensor):
        inv = (1.0 / temperature.float()).reshape(-1).expand(y.shape[0]).contiguous()
    else:
        inv = torch.full((y.shape[0],), 1.0 / float(temperature), device=h.device)
    logp, ent = _ChunkedLogprobs.apply(h, weight, y, inv, chunk_size)
    if not entropy:
        ent = torch.zeros_like(ent)
    return logp.reshape(lead), ent.reshape(lead)
