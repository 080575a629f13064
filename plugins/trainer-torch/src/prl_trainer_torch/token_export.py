"""Per-token training records (``trainer.enable_token_export``, ``docs/dashboard.md``).

With the switch on, every RL step writes what the trainer saw and computed for each packed
sequence (one document of a micro-batch) to::

    <run_dir>/token_exports/step_<S>/rank_<r>.jsonl     one JSON line per sequence
    <run_dir>/token_exports/step_<S>/STABLE             once every rank's file is complete

A line has ``schema_version: 1``; the scalars ``step``, ``rank``, ``micro_step``,
``micro_sequence_idx``, ``export_sequence_idx``, ``env_name``, plus ``trace_id`` and
``branch_index`` (which trace branch the sequence came from, so a viewer can join it with
the trace stream); and token-aligned arrays, entry i for token i:

* ``token_ids``, ``position_ids``, ``loss_mask``, ``advantages``, the loss weights
  ``rl_weights``, ``ce_weights``, ``ref_kl_weights``;
* ``inference_logprobs`` (sampler) and ``trainer_logprobs`` (this step's forward, before the
  optimizer step), ``entropy`` of the tempered distribution;
* ``log_importance_ratio`` ℓ = logp − logq, ``importance_ratio`` e^ℓ,
  ``mismatch_kl`` e^ℓ − 1 − ℓ, ``prob_delta`` p − q;
* ``is_masked_high`` / ``is_masked_low``: the rl token lies above / below the loss's trust
  region (``loss.eps``: p − q > eps or < −eps, as IPO drops it; or, for a loss with a ratio
  band, e^ℓ > ratio_high or < ratio_low), and ``is_masked`` = either.

For ``prl replay`` (:mod:`prl_trainer_torch.step_replay`) the step directory also holds the
exact inputs and results of the step, which the rounded per-token lines cannot give::

    batch_rank_<r>.msgpack   the micro-batches rank r trained on, as received (floats as
                             64-bit, so every value round-trips)
    step.json                rank 0: {"step", "loss", "grad_norm", "lr"}, the loss and the
                             pre-clip gradient norm at full precision

Non-finite numbers are written as null. A rank writes its file under a temporary name and
renames it when the step is done, so a reader never sees half a file; the rank that
completes the set writes ``STABLE`` (every rank checks after its rename, so the last one
always sees the full set). Padding sequences are not exported.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import torch

from prl import layout
from prl.fsutil import write_atomic

if TYPE_CHECKING:  # annotations only
    from prl.contracts.loss import LossConfig

SCHEMA_VERSION = 1
STABLE = "STABLE"
STEP_RECORD = "step.json"
BATCH_FORMAT = 1
DECIMALS = 6


def host_lists(tensors: list[torch.Tensor]) -> list[list]:
    """Each 1-D tensor as a Python list, all in one device-to-host copy (one copy per
    tensor would make the host wait for the GPU each time): floating values as float32
    gives them, integers as ints (exact below 2**53: token and position ids), bools as bools."""
    return host_lists_later(tensors)()


def host_lists_later(tensors: list[torch.Tensor]) -> Callable[[], list[list]]:
    """:func:`host_lists` in two halves: the one copy is queued now (asynchronous, into
    pinned memory, on a GPU) and the returned function waits for it and makes the lists,
    so another thread can do that while this one queues more work."""
    if not tensors:
        return list
    kinds = [(t.numel(), t.dtype) for t in tensors]
    flat = torch.cat([_as_double(t.detach().reshape(-1)) for t in tensors])
    done = None
    if flat.device.type == "cuda":
        flat = flat.to("cpu", non_blocking=True)
        done = torch.cuda.Event()
        done.record()

    def lists() -> list[list]:
        if done is not None:
            done.synchronize()
        values, out, at = flat.tolist(), [], 0
        for n, dtype in kinds:
            part = values[at : at + n]
            at += n
            if dtype == torch.bool:
                part = [v != 0 for v in part]
            elif not dtype.is_floating_point:
                part = [int(v) for v in part]
            out.append(part)
        return out

    return lists


def _as_double(t: torch.Tensor) -> torch.Tensor:
    # floating values rounded to float32 first: the precision the export has always written
    return t.float().double() if t.dtype.is_floating_point else t.double()


def _rounded(values: list[float]) -> list[float | None]:
    return [round(v, DECIMALS) if math.isfinite(v) else None for v in values]


def trust_region(loss_config: LossConfig, logp: torch.Tensor, logq: torch.Tensor, rl: torch.Tensor):
    """(above, below) masks of the rl tokens outside the loss's trust region (module doc)."""
    eps = getattr(loss_config, "eps", None)
    if isinstance(eps, (int, float)):
        delta = logp.exp() - logq.exp()
        return rl & (delta > eps), rl & (delta < -eps)
    high, low = getattr(loss_config, "ratio_high", None), getattr(loss_config, "ratio_low", None)
    if isinstance(high, (int, float)) and isinstance(low, (int, float)):
        ratio = (logp - logq).exp()
        return rl & (ratio > high), rl & (ratio < low)
    none = torch.zeros_like(rl)
    return none, none


@dataclass(frozen=True)
class Sequence:
    """One real packed sequence of a micro-batch: a trace branch's tokens ``start:stop``."""

    index: int  # position among the micro-batch's sequences (padding ones included)
    trace_id: str
    branch_index: int
    env_name: str
    start: int
    stop: int


def sequences(mb: Any) -> Iterator[Sequence]:
    """The sequences of micro-batch ``mb`` that came from a trace branch, in packing order;
    padding sequences (no trace id, or branch index -1) are skipped. Both per-token consumers
    of a micro-batch (this exporter, :mod:`prl_trainer_torch.annotations`) split it here."""
    trace_ids = mb.trace_ids or [""] * len(mb.seq_lens)
    branches = mb.branch_indices or [0] * len(mb.seq_lens)
    start = 0
    for index, n in enumerate(mb.seq_lens):
        if branches[index] >= 0 and trace_ids[index]:
            yield Sequence(index, trace_ids[index], branches[index], mb.seq_env_names[index], start, start + n)
        start += n


def batch_path(run_dir: Path, step: int, rank: int) -> Path:
    """Where rank ``rank``'s exported batch of ``step`` lives."""
    return layout.step_dir(Path(run_dir) / "token_exports", step) / f"batch_rank_{rank}.msgpack"


def read_batch(path: Path) -> list[dict[str, Any]]:
    """The micro-batches of an exported batch file (:meth:`TokenExporter.keep_batch`)."""
    payload = msgpack.unpackb(Path(path).read_bytes(), strict_map_key=False)
    return payload["micro_batches"]


class TokenExporter:
    """Writes one rank's token export for each step (see module docstring)."""

    def __init__(self, run_dir: Path, rank: int, world: int, loss_config: LossConfig) -> None:
        self.root = Path(run_dir) / "token_exports"
        self.rank, self.world, self.loss_config = rank, world, loss_config
        self._fh = None
        self._step = 0
        self._count = 0
        # (micro_step, its real sequences, its per-token device tensors) until finish()
        self._pending: list[tuple[int, list[Sequence], dict[str, torch.Tensor]]] = []

    def _paths(self, step: int) -> tuple[Path, Path]:
        final = layout.step_dir(self.root, step) / f"rank_{self.rank}.jsonl"
        return final, final.with_name(final.name + ".tmp")

    def begin(self, step: int) -> None:
        """Start step ``step`` (a marker left by a killed attempt is withdrawn first)."""
        final, tmp = self._paths(step)
        final.parent.mkdir(parents=True, exist_ok=True)
        # A killed attempt's files must not vouch for this one: the marker, and this rank's
        # file (other ranks remove theirs before the step's first collective, so before
        # any rank can finish and look for the full set).
        (final.parent / STABLE).unlink(missing_ok=True)
        final.unlink(missing_ok=True)
        self._fh = open(tmp, "w", encoding="utf-8")  # noqa: SIM115 (closed in finish)
        self._step, self._count, self._pending = step, 0, []

    def keep_batch(self, raw: list[dict[str, Any]]) -> None:
        """Write this rank's micro-batches of the step exactly as received (``prl replay``)."""
        payload = {"format": BATCH_FORMAT, "step": self._step, "rank": self.rank, "micro_batches": raw}
        # 64-bit floats: whatever the transport delivered comes back bit for bit.
        write_atomic(batch_path(self.root.parent, self._step, self.rank), msgpack.packb(payload))

    def record(self, metrics: dict[str, float]) -> None:
        """Rank 0 writes the step's loss, pre-clip grad norm and lr (``json`` floats round-trip)."""
        if self.rank != 0:
            return
        keys = {"loss": "loss/all", "grad_norm": "optim/grad_norm", "lr": "optim/lr"}
        record = {"step": self._step, **{k: float(metrics[m]) for k, m in keys.items()}}
        write_atomic(layout.step_dir(self.root, self._step) / STEP_RECORD, json.dumps(record) + "\n")

    def add(self, micro_step: int, mb: Any, logp: torch.Tensor, entropy: torch.Tensor) -> None:
        """Keep one micro-batch's per-token values (device tensors) for :meth:`finish`, which
        writes its real sequences: copied here, they would make the host wait for this
        micro-batch's forward pass before it could queue the backward."""
        if self._fh is None:
            raise RuntimeError("token export: add() before begin()")
        log_r = logp.detach() - mb.inference_logprobs
        rl = mb.loss_mask & (mb.rl_weights != 0)
        high, low = trust_region(self.loss_config, logp.detach(), mb.inference_logprobs, rl)
        per_token = {
            "token_ids": mb.input_ids, "position_ids": mb.position_ids, "loss_mask": mb.loss_mask,
            "advantages": mb.advantages, "inference_logprobs": mb.inference_logprobs,
            "trainer_logprobs": logp.detach(), "entropy": entropy, "mismatch_kl": log_r.exp() - 1 - log_r,
            "log_importance_ratio": log_r, "importance_ratio": log_r.exp(),
            "prob_delta": logp.detach().exp() - mb.inference_logprobs.exp(),
            "is_masked": high | low, "is_masked_high": high, "is_masked_low": low,
            "rl_weights": mb.rl_weights, "ce_weights": mb.ce_weights, "ref_kl_weights": mb.ref_kl_weights,
        }  # fmt: skip
        seqs = list(sequences(mb))
        if seqs:  # a padding micro-batch exports nothing
            self._pending.append((micro_step, seqs, per_token))

    def _write_pending(self) -> None:
        """The kept micro-batches' lines, every value copied to the host in one go."""
        pending, self._pending = self._pending, []
        values = iter(host_lists([v for _, _, per_token in pending for v in per_token.values()]))
        for micro_step, seqs, per_token in pending:
            arrays = {}
            for name, tensor in per_token.items():
                host = next(values)
                arrays[name] = _rounded(host) if tensor.dtype.is_floating_point else host
            for seq in seqs:
                record = {
                    "schema_version": SCHEMA_VERSION, "step": self._step, "rank": self.rank,
                    "micro_step": micro_step, "micro_sequence_idx": seq.index, "export_sequence_idx": self._count,
                    "env_name": seq.env_name, "trace_id": seq.trace_id, "branch_index": seq.branch_index,
                }  # fmt: skip
                record.update({k: v[seq.start : seq.stop] for k, v in arrays.items()})
                self._fh.write(json.dumps(record, separators=(",", ":")) + "\n")
                self._count += 1

    def finish(self) -> None:
        """Write the step's lines and publish this rank's file for the step; the rank
        completing the set marks it STABLE."""
        if self._fh is None:
            return
        self._write_pending()
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._fh = None
        final, tmp = self._paths(self._step)
        os.replace(tmp, final)
        ranks = [final.with_name(f"rank_{r}.jsonl") for r in range(self.world)]
        if all(p.exists() for p in ranks):
            write_atomic(final.parent / STABLE, json.dumps({"step": self._step, "ranks": self.world}) + "\n")
