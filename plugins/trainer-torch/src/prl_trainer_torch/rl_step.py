"""The RL forward/backward of one step over packed micro-batches (``docs/rl-loop.md``, ``docs/algorithms.md``).

Alignment. A micro-batch is a flat concatenation of documents; every per-token list
(``loss_mask``, ``advantages``, ``inference_logprobs``, ``temperatures``, weights) is aligned
with ``input_ids``: entry i describes token i. The model predicts token i at position i − 1,
so the trainer's log-probability of token i is

    logp_i = log softmax(z_{i−1} / tau_i)[x_i]

with ``tau_i`` the temperature token i was sampled at. A document's first token (position
id 0) has no prediction inside its document; it gets logp 0 and is removed from every mask.

Loss. Denominators come first: each micro-batch's share (``local_scales``, found on the host
from its lists by :mod:`prl_trainer_torch.rl_host`) summed over this rank, then
``global_scales`` over ranks; only then is each micro-batch run through the rl loss
plugin and the fixed ce / ref_kl components (``component_losses``) and normalised:

    loss = Σ rl / rl_scale + Σ ce / ce_scale + Σ ref_kl / ref_kl_scale

Each micro-batch's backward uses ``loss_mb · world``: FSDP averages gradients over ranks, so
the sum over micro-batches and ranks is exactly the gradient of the one global loss.

Sampling replay. A micro-batch may carry ``sampling_mask`` (per token, the ids a top-p /
top-k sampler kept; empty where it did not truncate) and ``sampling_mask_logprobs`` (the
sampler's untruncated logprobs of those ids). For a masked token the trainer's logp is
renormalised over the kept set (:mod:`prl_trainer_torch.replay`), and so are the sampler's
(its logprob and per-id ones minus their logsumexp), so the ratio compares the two
truncated distributions. ``LossInputs.trainer_mask_logprobs`` / ``inference_mask_logprobs``
([T, K], −inf padding) carry the per-id values to the loss (IPO's score centering), and
``mismatch/sampling_mask`` is the fraction of masked loss tokens whose kept set is not the
trainer's own top set.

Statistics. ``entropy`` (of the tempered distribution) and ``mismatch_kl`` = e^ℓ − 1 − ℓ,
ℓ = logp − inference logp, are averaged over the loss tokens, for all envs and per env;
entropy also gets its std and max over those tokens.
Loss-plugin metrics (scalars, or per-token tensors first averaged over a micro-batch's rl
tokens) are averaged over micro-batches weighted by their rl token counts.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as tdist
from prl_loss_common import component_losses, global_scales, mismatch_kl, normalise, rl_mask

from prl.config.errors import ConfigError
from prl.contracts.loss import Loss, LossInputs
from prl_trainer_torch.attention import host_document_bounds
from prl_trainer_torch.replay import pad_masks
from prl_trainer_torch.rl_host import HostFacts, host_facts, replay_rows
from prl_trainer_torch.routing_replay import replay_routes, routes_of

WEIGHTS = ("rl_weights", "ce_weights", "ref_kl_weights")
FLOAT_FIELDS = ("advantages", "inference_logprobs", "temperatures", *WEIGHTS)


@dataclass
class MicroBatch:
    """One packed micro-batch as tensors on the trainer's device (all shaped [T])."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor
    inference_logprobs: torch.Tensor
    temperatures: torch.Tensor
    rl_weights: torch.Tensor
    ce_weights: torch.Tensor
    ref_kl_weights: torch.Tensor
    ref_logprobs: torch.Tensor | None
    env_ids: torch.Tensor
    env_names: list[str]
    tokens: int
    host: HostFacts  # denominators, component flags, samples with rl tokens: found on the host
    seq_lens: list[int] | None = None  # packed samples' token counts (per-sample losses split on them)
    # Per packed sample: its env, trace and branch (the token export joins them with traces).
    seq_env_names: list[str] = field(default_factory=list)
    trace_ids: list[str] | None = None
    branch_indices: list[int] | None = None
    # Sampling replay ([T, K], aligned with input_ids): each token's kept ids, which are
    # real, and the sampler's logprobs over them (−inf padding) when the batch carries them.
    mask_ids: torch.Tensor | None = None
    mask_valid: torch.Tensor | None = None
    mask_inference: torch.Tensor | None = None
    mask_rows: torch.Tensor | None = None  # positions whose prediction has a mask (rl_host.replay_rows)
    # documents' cumulative lengths and the longest, found on the host (attention.host_document_bounds)
    bounds: tuple[torch.Tensor, int] | None = None
    # routing replay: recorded expert ids per prediction position and which have one (routing_replay.routes_of)
    routes: tuple[torch.Tensor, torch.Tensor] | None = None
    # per packed document its images (a vision-language prompt's URLs; [] for text), or None
    images: list[list[str]] | None = None


@dataclass
class TokenOut:
    """Per-token trainer outputs of one micro-batch, aligned with ``input_ids``."""

    logp: torch.Tensor
    entropy: torch.Tensor
    mask_logp: torch.Tensor | None = None  # [T, K] log p_S over the kept ids (−inf padding)
    mask_mismatch: torch.Tensor | None = None  # [T] trainer and sampler disagree on the kept set


def to_micro_batch(raw: dict[str, Any], device: torch.device) -> MicroBatch:
    """Tensors from one msgpack micro-batch dict; first tokens of documents leave every mask."""
    masks = _sampling_masks(raw, device)
    positions = np.asarray(raw["position_ids"], dtype=np.int64)
    has_pred = positions != 0
    arrays = {k: _array(raw[k], torch.float32) for k in FLOAT_FIELDS}
    # Weights of tokens without a prediction are zeroed so they leave the scales too.
    for k in WEIGHTS:
        arrays[k] = np.where(has_pred, arrays[k], np.float32(0))
    loss_mask = _array(raw["loss_mask"], torch.bool) & has_pred
    fields = {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}
    _renormalise_sampler(fields, masks)
    ref = raw.get("ref_logprobs")
    names = sorted(set(raw["env_names"]))
    index = {n: i for i, n in enumerate(names)}
    env_ids = torch.repeat_interleave(
        torch.tensor([index[n] for n in raw["env_names"]], dtype=torch.long),
        torch.tensor(raw["seq_lens"], dtype=torch.long),
    ).to(device)
    return MicroBatch(
        input_ids=_tensor(raw["input_ids"], torch.long, device),
        position_ids=torch.from_numpy(positions).to(device),
        loss_mask=torch.from_numpy(loss_mask).to(device),
        ref_logprobs=_tensor(ref, torch.float32, device) if ref is not None else None,
        env_ids=env_ids,
        env_names=names,
        # padding micro-batches (all-false loss mask) train nothing and count no tokens
        tokens=len(raw["input_ids"]) if any(raw["loss_mask"]) else 0,
        host=host_facts(loss_mask, arrays, raw["seq_lens"]),
        seq_lens=list(raw["seq_lens"]),
        seq_env_names=list(raw["env_names"]),
        trace_ids=raw.get("trace_ids"),
        branch_indices=raw.get("branch_indices"),
        bounds=host_document_bounds(positions, device),
        routes=routes_of(raw, device),
        images=raw.get("images"),
        **masks,
        **fields,
    )


_NUMPY = {torch.long: np.int64, torch.float32: np.float32, torch.bool: np.bool_}


def _tensor(values: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A msgpack list as a tensor on ``device``. Through numpy: ``torch.tensor`` checks every
    element of a Python list and is about 3x slower, a cost paid on every token of every step."""
    return torch.from_numpy(_array(values, dtype)).to(device)


def _array(values: list, dtype: torch.dtype) -> np.ndarray:
    """A msgpack list as the numpy array of a ``dtype`` tensor."""
    array = np.asarray(values)
    if array.dtype == object:  # numpy would turn a None into NaN without a word; torch refuses
        raise TypeError(f"a batch field holds a value that is not a number (a null?); expected {dtype}")
    return array.astype(_NUMPY[dtype])


def _sampling_masks(raw: dict[str, Any], device: torch.device) -> dict[str, torch.Tensor | None]:
    """``sampling_mask`` (and ``sampling_mask_logprobs``) of a micro-batch as padded tensors."""
    masks, values = raw.get("sampling_mask"), raw.get("sampling_mask_logprobs")
    if masks is not None and len(masks) != len(raw["input_ids"]):
        raise ConfigError(
            f"sampling_mask: {len(masks)} entries for {len(raw['input_ids'])} tokens; "
            "the rollout packer must align one kept-id list with every token"
        )
    if values is not None and masks is not None:
        if not any(values):
            values = None  # a backend that reports the kept ids only
        elif len(values) != len(masks) or any(len(v) != len(m) for m, v in zip(masks, values, strict=False)):
            raise ConfigError("sampling_mask_logprobs: must give one logprob per kept id of sampling_mask")
    padded = pad_masks(masks, values)
    if padded is None:
        return {}
    ids, valid, vals = padded
    return {
        "mask_ids": ids.to(device),
        "mask_valid": valid.to(device),
        "mask_inference": vals.to(device) if vals is not None else None,
        "mask_rows": replay_rows(valid, device),
    }


def _renormalise_sampler(fields: dict[str, torch.Tensor], masks: dict[str, torch.Tensor | None]) -> None:
    """The sampler reports untruncated logprobs; over a kept set S both the sampled token's
    logprob and the per-id ones become log q − logsumexp_S log q (what it really sampled from)."""
    vals = masks.get("mask_inference")
    if vals is None:
        return
    has = masks["mask_valid"].any(-1)
    lse = torch.where(has, torch.logsumexp(vals, -1), torch.zeros_like(has, dtype=vals.dtype))
    fields["inference_logprobs"] = fields["inference_logprobs"] - lse
    masks["mask_inference"] = vals - lse[:, None]


def token_logprobs(policy, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp_i, entropy_i) aligned with ``input_ids`` (module docstring); 0 at document starts."""
    out = forward_tokens(policy, mb)
    return out.logp, out.entropy


def forward_tokens(policy, mb: MicroBatch) -> TokenOut:
    """The policy's per-token outputs for ``mb``: logp (renormalised over the kept set where
    the token has a sampling mask, :mod:`prl_trainer_torch.replay`) and entropy."""
    targets = torch.roll(mb.input_ids, -1)
    temps = torch.roll(mb.temperatures, -1).clamp_min(1e-6)
    extra = {}
    if mb.mask_ids is not None:
        # token i's mask describes the prediction made at position i − 1, like its target
        ids, valid = torch.roll(mb.mask_ids, -1, 0)[None], torch.roll(mb.mask_valid, -1, 0)[None]
        extra["replay"] = (ids, valid) if mb.mask_rows is None else (ids, valid, mb.mask_rows)
    if mb.bounds is not None:
        extra["bounds"] = mb.bounds
    if mb.images is not None:
        extra["images"] = mb.images  # only a vision-language policy is given them
    replay_routes(policy, mb.routes)  # kept until the next micro-batch: the backward may recompute
    outs = policy(mb.input_ids[None], mb.position_ids[None], targets[None], temps[None], entropy=True, **extra)
    keep = mb.position_ids != 0
    logp, ent = (_shift(t[0], keep) for t in outs[:2])
    out = TokenOut(logp, ent.detach())
    if "replay" in extra:
        mask_logp = torch.cat([outs[2].new_full((1, outs[2].shape[-1]), float("-inf")), outs[2][0, :-1]])
        out.mask_logp = torch.where(keep[:, None], mask_logp, torch.full_like(mask_logp, float("-inf")))
        out.mask_mismatch = _shift(outs[3][0], keep)
    return out


def _shift(values: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Position outputs (position i predicts token i + 1) moved onto their tokens; 0 at
    document starts."""
    values = torch.cat([values.new_zeros(1), values[:-1]])
    return torch.where(keep, values, torch.zeros_like(values))


@dataclass
class StepStats:
    """Sums this rank accumulates over its micro-batches (reduced over ranks at the end).

    Values are device tensors (or 0.0 before the first micro-batch): reading one on the host
    would make the CPU wait for the GPU between micro-batches, so nothing is read until
    :func:`_plain` copies them all in one transfer after the step."""

    loss: dict[str, Any] = field(default_factory=lambda: defaultdict(float))
    plugin: dict[str, Any] = field(default_factory=lambda: defaultdict(float))
    plugin_weight: Any = 0.0
    # per env (and "all"): [entropy sum, mismatch-kl sum, token count, entropy square sum, entropy max]
    per_env: dict[str, Any] = field(default_factory=dict)
    tokens: float = 0.0
    nonfinite: Any = 0.0
    # sampling replay: loss tokens with a sampling mask, and those whose mask the trainer disputes
    replay_tokens: Any = 0.0
    replay_mismatch: Any = 0.0

    def add_tokens_stats(self, mb: MicroBatch, entropy: torch.Tensor, mkl: torch.Tensor) -> None:
        """Entropy and mismatch-KL sums of ``mb``'s loss tokens, per env, without a host sync
        (masked sums and index_add over env ids, never boolean indexing)."""
        mask, ids, n = mb.loss_mask, mb.env_ids, len(mb.env_names)
        ent = torch.where(mask, entropy.detach().double(), 0.0)
        columns = (ent, torch.where(mask, mkl.detach().double(), 0.0), mask.double(), ent * ent)
        sums = torch.stack([ent.new_zeros(n).index_add_(0, ids, c) for c in columns], 1)
        high = torch.where(mask, entropy.detach().double(), -math.inf)
        top = ent.new_full((n,), -math.inf).scatter_reduce_(0, ids, high, "amax")
        rows = torch.cat([sums, top[:, None]], 1)  # [envs, 5]
        every = torch.cat([sums.sum(0), top.max()[None]])
        for key, row in (("all", every), *((name, rows[i]) for i, name in enumerate(mb.env_names))):
            acc = self.per_env.get(key)
            self.per_env[key] = row if acc is None else torch.cat([acc[:4] + row[:4], torch.maximum(acc[4:], row[4:])])


def run_micro_batches(
    policy, loss_fn: Loss, mbs: list[MicroBatch], world: int, export=None, before_last_backward=None
) -> StepStats:
    """Forward and backward over this rank's micro-batches; gradients accumulate in ``policy``.
    ``before_last_backward`` (or None) is called before the last micro-batch's backward
    (full offload arms its in-backward optimizer step there).

    ``export`` (anything with ``add(micro_step, mb, logp, entropy)``: the token exporter, the
    annotation collector, both through :class:`prl_trainer_torch.annotations.Fanout`; or
    None) receives each micro-batch's per-token logprobs and entropy after its forward pass."""
    # Found on the host with each micro-batch (rl_host): asked of the device, every answer
    # would make the host wait for the GPU, and asked during the loop, for a forward pass.
    scales = global_scales(sum(mb.host.scales for mb in mbs))
    present = [mb.host.present for mb in mbs]
    stats = StepStats()
    for micro_step, mb in enumerate(mbs):
        out = forward_tokens(policy, mb)
        logp, entropy = out.logp, out.entropy
        if export is not None:
            export.add(micro_step, mb, logp, entropy)
        inputs = LossInputs(
            trainer_logprobs=logp,
            inference_logprobs=mb.inference_logprobs,
            advantages=mb.advantages,
            loss_mask=mb.loss_mask,
            rl_weights=mb.rl_weights,
            ref_logprobs=mb.ref_logprobs,
            trainer_mask_logprobs=out.mask_logp,
            inference_mask_logprobs=mb.mask_inference,
            seq_lens=mb.seq_lens,
            rl_samples=mb.host.rl_samples,
        )
        sums = component_losses(
            loss_fn, inputs, ce_weights=mb.ce_weights, ref_kl_weights=mb.ref_kl_weights, present=present[micro_step]
        )
        loss = normalise(sums, scales)
        stats.nonfinite += (~torch.isfinite(loss.detach())).double()
        if before_last_backward is not None and micro_step == len(mbs) - 1:
            before_last_backward()
        (loss * world).backward()
        _accumulate(stats, sums, scales, mb, logp.detach(), entropy, has_rl=present[micro_step][0])
        if out.mask_mismatch is not None:
            masked = mb.loss_mask & mb.mask_valid.any(-1)
            stats.replay_tokens += masked.sum().double()
            stats.replay_mismatch += (out.mask_mismatch & masked).sum().double()
    return stats


def _accumulate(
    stats: StepStats, sums, scales, mb: MicroBatch, logp: torch.Tensor, entropy: torch.Tensor, has_rl: bool
) -> None:
    """Add one micro-batch to ``stats`` (device tensors; ``has_rl``: it has rl tokens)."""
    for name, total, scale in (
        ("rl", sums.rl, scales.rl),
        ("ce", sums.ce, scales.ce),
        ("ref_kl", sums.ref_kl, scales.ref_kl),
    ):
        value = total.detach().double() / (scale if scale > 0 else 1.0)
        stats.loss[name] += value
        stats.loss["all"] += value
    if has_rl:  # loss-plugin metrics are weighted by rl tokens: a micro-batch without any adds nothing
        rl_tokens = rl_mask(mb.loss_mask, mb.rl_weights)
        weight = rl_tokens.sum().double()
        for name, value in sums.metrics.items():
            if not torch.is_tensor(value):
                continue
            value = value.detach().double()
            if value.numel() != 1:  # a per-token metric (LossOutputs): its mean over the rl tokens
                value = torch.where(rl_tokens, value, 0.0).sum() / weight
            stats.plugin[name] += value.reshape(()) * weight
        stats.plugin_weight += weight
    mkl = mismatch_kl(logp - mb.inference_logprobs)
    stats.add_tokens_stats(mb, entropy, mkl)
    stats.tokens += mb.tokens


def reduce_stats(stats: StepStats, world: int) -> dict[str, float]:
    """Metrics of the step over all ranks (collective when ``world > 1``)."""
    if world > 1:
        gathered: list[Any] = [None] * world
        tdist.all_gather_object(gathered, _plain(stats))
    else:
        gathered = [_plain(stats)]
    return merge_stats(gathered)


def merge_stats(ranks: list[dict[str, Any]]) -> dict[str, float]:
    """The step's metrics from every rank's sums (``_plain`` dicts): sums add, then divide."""
    loss: dict[str, float] = defaultdict(float)
    plugin: dict[str, float] = defaultdict(float)
    per_env: dict[str, list[float]] = {}
    pw = tokens = nonfinite = replay_tokens = replay_mismatch = 0.0
    for s in ranks:
        replay_tokens += s.get("replay_tokens", 0.0)
        replay_mismatch += s.get("replay_mismatch", 0.0)
        for k, v in s["loss"].items():
            loss[k] += v
        for k, v in s["plugin"].items():
            plugin[k] += v
        for k, v in s["per_env"].items():
            acc = per_env.get(k)
            # the four sums add across ranks; the entropy max is the max of the ranks' maxima
            per_env[k] = list(v) if acc is None else [*(acc[i] + v[i] for i in range(4)), max(acc[4], v[4])]
        pw, tokens, nonfinite = pw + s["plugin_weight"], tokens + s["tokens"], nonfinite + s["nonfinite"]
    out = {f"loss/{k}": v for k, v in loss.items()}
    for k, v in plugin.items():
        # is_masked is a headline metric of its own (``docs/monitoring.md``); the rest live under loss/.
        out["is_masked/mean" if k == "is_masked" else f"loss/{k}"] = v / max(pw, 1.0)
    for env, (ent, mkl, count, ent_sq, ent_max) in per_env.items():
        mean = ent / max(count, 1.0)
        out[f"entropy/{env}/mean"] = mean
        # population std from the sums: E[x^2] - E[x]^2, clamped against rounding below zero
        out[f"entropy/{env}/std"] = math.sqrt(max(ent_sq / max(count, 1.0) - mean * mean, 0.0))
        out[f"entropy/{env}/max"] = ent_max
        out[f"mismatch_kl/{env}/mean"] = mkl / max(count, 1.0)
    out["loss/nonfinite_count"] = nonfinite
    if replay_tokens > 0:
        out["mismatch/sampling_mask"] = replay_mismatch / replay_tokens
    out["_tokens"] = tokens
    return out


def _plain(stats: StepStats) -> dict[str, Any]:
    """``stats`` as plain floats (one device-to-host copy for every tensor in it); envs
    without loss tokens are left out."""
    plain: dict[str, Any] = {
        "loss": dict(stats.loss), "plugin": dict(stats.plugin), "per_env": dict(stats.per_env),
        "plugin_weight": stats.plugin_weight, "tokens": stats.tokens, "nonfinite": stats.nonfinite,
        "replay_tokens": stats.replay_tokens, "replay_mismatch": stats.replay_mismatch,
    }  # fmt: skip
    slots = [(d, k) for d in (plain, plain["loss"], plain["plugin"], plain["per_env"]) for k in d]
    slots = [(d, k) for d, k in slots if torch.is_tensor(d[k])]
    if slots:
        flat = torch.cat([d[k].reshape(-1).double() for d, k in slots]).tolist()
        at = 0
        for d, k in slots:
            size = d[k].numel()
            d[k] = flat[at : at + size] if d is plain["per_env"] else flat[at]
            at += size
    plain["per_env"] = {k: v for k, v in plain["per_env"].items() if v[2] > 0}
    return plain
