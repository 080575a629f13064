"""Throughput/MFU accounting, metric emission and the console progress bar.

Model FLOPs per trained token follow the usual estimate: 6 N for the matmuls of N
non-embedding parameters (forward 2 N, backward 4 N) plus causal attention, which for a
document of length L costs 6 * layers * hidden * L^2 over the whole document (QK^T and
AV, halved by causality, times 3 for forward and backward). Activation-checkpoint
recomputation is not counted (MFU counts model FLOPs, not hardware FLOPs).
MFU = achieved model FLOP/s / (peak bf16 dense FLOP/s of the device x world size). The peak
comes from the GPU's name (``PEAK_FLOPS``), or from ``$PRL_PEAK_FLOPS`` (FLOP/s per device)
for other devices; without either (a CPU run) no ``perf/mfu`` is reported.
"""

from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger("prl.trainer")

# Dense bf16 tensor-core peaks (FLOP/s) by device-name fragment.
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12, "4090": 165e12}


def peak_flops(device: torch.device) -> float | None:
    """Peak FLOP/s of one ``device``: ``$PRL_PEAK_FLOPS`` when set, else the table's figure
    for a known GPU, else None."""
    override = os.environ.get("PRL_PEAK_FLOPS")
    if override:
        try:
            value = float(override)
        except ValueError:
            value = 0.0
        if value > 0:
            return value
        log.warning("PRL_PEAK_FLOPS=%r is not a positive number of FLOP/s; ignored", override)
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_FLOPS.items() if k in name), None)


def model_flops(n_params: int, layers: int, hidden: int, doc_lengths: list[int]) -> float:
    """Training FLOPs of one pass over documents of the given lengths (module docstring)."""
    tokens = sum(doc_lengths)
    return 6.0 * n_params * tokens + 6.0 * layers * hidden * sum(n * n for n in doc_lengths)


def perf_metrics(flops: float, tokens: float, seconds: float, world: int, peak: float | None) -> dict[str, float]:
    """``perf/throughput`` (tokens/s over all ranks), ``perf/throughput_per_gpu`` and, with
    a known ``peak``, ``perf/mfu`` for one step of ``flops`` model FLOPs on ``world`` ranks."""
    seconds = max(seconds, 1e-9)
    out = {"perf/throughput": tokens / seconds, "perf/throughput_per_gpu": tokens / seconds / world}
    if peak:
        out["perf/mfu"] = flops / seconds / (peak * world)
    return out


def peak_memory_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


class Progress:
    """A rich progress bar on rank 0 showing step, loss and throughput."""

    def __init__(self, enabled: bool, total: int, start: int) -> None:
        self.bar = None
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        self.bar = RichProgress(
            TextColumn("[bold]sft"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeRemainingColumn(),
            transient=False,
        )
        self.task = self.bar.add_task("sft", total=total, completed=start, info="")
        self.bar.start()

    def update(self, step: int, info: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=step, info=info)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def emit(monitors: list, metrics: dict[str, float], step: int | None) -> None:
    for m in monitors:
        m.log(metrics, step)
