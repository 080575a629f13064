"""The SFT loop: build, (resume,) step, log, validate, checkpoint.

Loss of a step = sum over every rank's micro-batches of the target-token NLL on loss
tokens, divided by the global number of loss tokens of the step (the mean NLL per token
over the global batch). Each micro-batch's backward uses ``sum_nll * world / N_global``
because FSDP averages gradients over ranks; the sum of the micro-batch gradients is then
the gradient of the global mean on every world size.

Run as ``python -m prl_trainer_torch.sft <resolved sft.json>`` (what torchrun starts).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import TYPE_CHECKING

import torch
import torch.distributed as tdist

from prl import layout
from prl.config.errors import DataError
from prl.contracts.monitor import build_monitors
from prl_trainer_torch import checkpoint as ckpt
from prl_trainer_torch.common import all_sum, publish_weights, run_dir_of
from prl_trainer_torch.device_rows import DeviceRow, rows_to_device
from prl_trainer_torch.entry import rank_main, run_here
from prl_trainer_torch.loader import SampleSource, SFTLoader, eval_rows
from prl_trainer_torch.lora import maybe_adapter
from prl_trainer_torch.metrics import (
    Progress,
    emit,
    model_flops,
    peak_flops,
    peak_memory_gib,
)
from prl_trainer_torch.model import (
    GarbageCollector,
    apply_runtime_knobs,
    count_params,
    init_distributed,
    load_hf_model,
    parallelize,
    resolve_dtype,
)
from prl_trainer_torch.moe import RoutingStats, setup_moe
from prl_trainer_torch.optim import build_optimizer, build_scheduler, optimizer_step

if TYPE_CHECKING:  # annotations only
    from prl.config.roots import SFTConfig

log = logging.getLogger("prl.trainer")
SFT_WEIGHT_DECAY = 0.01
VAL_ROWS_PER_COPY = 64  # validation rows sent to the device per copy: bounded memory, few waits


class SFTRun:
    """One SFT run on this rank."""

    def __init__(self, config: SFTConfig) -> None:
        self.config = config
        self.dist = init_distributed()
        torch.manual_seed(config.seed)
        self.run_dir = run_dir_of(config)
        self.ckpt_root = ckpt.ckpt_root(config, self.run_dir)
        mcfg = config.model
        apply_runtime_knobs(mcfg)
        dtype = resolve_dtype(mcfg.dtype, self.dist.device)
        hf = load_hf_model(mcfg.name, dtype, mcfg.attn_implementation)
        self.n_params = count_params(hf)[1]
        self.adapter = maybe_adapter(hf, mcfg)  # [model.lora]: only the adapter trains
        setup_moe(hf, mcfg, rl=False)  # model.freeze_moe_router: auto trains the routers in SFT
        self.shape = (hf.config.num_hidden_layers, hf.config.hidden_size)
        self.hf = hf
        dp = mcfg.data_parallel(self.dist.world)
        self.policy = parallelize(
            hf, self.dist, mcfg.activation_checkpointing, dp=dp, ac_freq=mcfg.activation_checkpointing_freq
        )
        self.policy.routing = RoutingStats.of(hf, self.dist.device)
        self.gc = GarbageCollector(mcfg.gc)
        self.optimizer = build_optimizer(
            self.policy.parameters(), config.optim, SFT_WEIGHT_DECAY, config.model, self.dist.device
        )
        tokenizer = config.tokenizer.name or mcfg.name
        source = SampleSource(config.data, config.renderer, tokenizer, hf.config.vocab_size)
        self.loader = SFTLoader(source, config.data, self.dist.rank, self.dist.world)
        self.labels = source.labels()
        self.total = config.max_steps or self.loader.steps_per_epoch()
        if self.total < 1:
            raise DataError("data: one epoch has fewer packed rows than data.batch_size; set max_steps or add data")
        self.scheduler = build_scheduler(self.optimizer, config.scheduler, self.total)
        self.progress = {"step": 0, "total_tokens": 0, "total_samples": 0}
        self._resume()
        self.val = self._val_rows(tokenizer, hf.config.vocab_size) if config.val is not None else None
        main = self.dist.is_main
        self.monitors = build_monitors(config, self.run_dir, "trainer") if main else []
        self.bar = Progress(main and sys.stderr.isatty(), self.total, self.progress["step"])
        self.peak = peak_flops(self.dist.device)
        # Online eval: the weights go to inference at start-up and at every step an eval is due.
        evaluates = getattr(config, "eval", None) is not None
        self.transport = config.weight_broadcast.build(run_dir=self.run_dir) if evaluates else None
        self.broadcast_at: set[int] = set()

    def _resume(self) -> None:
        step_dir = ckpt.resume_dir(self.config, self.ckpt_root)
        if step_dir is None:
            return
        res = self.config.resume
        lora = self.adapter is not None
        self.progress = ckpt.load(step_dir, self.hf, self.optimizer, self.scheduler, res, adapter_only=lora)
        if res.skip_scheduler:
            remaining = max(self.total - self.progress["step"], 1)
            self.scheduler = build_scheduler(self.optimizer, self.config.scheduler, remaining)
        if not res.skip_dataloader:
            state = ckpt.load_loader_state(step_dir, self.dist.rank)
            if state is not None:
                self.loader.load_state_dict(state)
        log.info("resumed from %s at step %d", step_dir, self.progress["step"])

    def _val_rows(self, tokenizer: str, vocab: int):
        source = SampleSource(self.config.val.data, self.config.renderer, tokenizer, vocab)
        return eval_rows(source, self.config.val.data, self.dist.rank, self.dist.world)

    def _forward_nll(self, row: DeviceRow) -> torch.Tensor:
        logp, _ = self.policy(row.input_ids, row.position_ids, row.targets, bounds=row.bounds)
        return -(logp * row.loss_mask).sum()

    def accumulate(self, rows: list[DeviceRow], scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and backward of every row; the step's summed NLL and count of non-finite
        row losses, left on the device. Nothing here waits for the GPU: a host read of a
        device value (``float``, ``int``, a truth test) per row would stop the host from
        queueing the next row's kernels until the last backward had finished."""
        dev = self.dist.device
        # float64, as the Python float that summed the rows' losses before them
        nll_sum = torch.zeros((), dtype=torch.float64, device=dev)
        nans = torch.zeros((), dtype=torch.float64, device=dev)
        for row in rows:
            nll = self._forward_nll(row)
            loss = nll * scale
            nans += ~torch.isfinite(loss)
            loss.backward()
            nll_sum += nll.detach()
        return nll_sum, nans

    def train_step(self) -> dict[str, float]:
        """One optimizer step; returns the step's metrics."""
        t0 = time.perf_counter()
        batch = self.loader.next_step()
        self.policy.train()
        scale = self.dist.world / max(batch.loss_tokens, 1)
        nll_sum, nans = self.accumulate(rows_to_device(batch.rows, self.dist.device), scale)
        t1 = time.perf_counter()
        lr = self.optimizer.param_groups[0]["lr"]
        grad_norm = optimizer_step(self.optimizer, self.policy, self.config.optim.max_norm)
        self.scheduler.step()
        # Read back only now, after every row's kernels are queued: the loss and count for the log.
        nll_sum, nans = all_sum(torch.stack([nll_sum, nans]).tolist(), self.dist)
        if self.dist.device.type == "cuda":
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        loss = nll_sum / max(batch.loss_tokens, 1)
        self.progress["step"] += 1
        self.progress["total_tokens"] += batch.tokens
        self.progress["total_samples"] += batch.samples
        return self._step_metrics(batch, loss, float(grad_norm), lr, nans, (t0, t1, t2))

    def _step_metrics(self, batch, loss: float, grad_norm: float, lr: float, nans: float, times) -> dict[str, float]:
        t0, t1, t2 = times
        dt = t2 - t0
        docs = [n for r in batch.rows for n in r.lengths]
        flops = all_sum([model_flops(self.n_params, *self.shape, docs)], self.dist)[0]
        metrics = {
            "loss/mean": loss,
            "loss/perplexity": math.exp(min(loss, 20.0)),
            "loss/nan_count": nans,
            "optim/lr": lr,
            "optim/grad_norm": grad_norm,
            "perf/throughput": batch.tokens / dt,
            "perf/peak_memory": peak_memory_gib(self.dist.device),
            "time/step": dt,
            "time/forward_backward": t1 - t0,
            "time/optimizer": t2 - t1,
            "progress/epoch": float(self.loader.epoch),
            "progress/num_samples": float(self.progress["total_samples"]),
            "progress/num_tokens": float(self.progress["total_tokens"]),
        }
        if self.peak:
            metrics["perf/mfu"] = flops / dt / (self.peak * self.dist.world)
        metrics.update(self._mixture_metrics())
        if self.policy.routing is not None:
            metrics.update(self.policy.routing.step_metrics(self.dist.world))
        return metrics

    def _mixture_metrics(self) -> dict[str, float]:
        """progress/<subset>/ratio_{samples,tokens}: each subset's share of everything
        trained so far, when several subsets or splits are interleaved."""
        out: dict[str, float] = {}
        for kind, seen in (("samples", self.loader.seen_samples), ("tokens", self.loader.seen_tokens)):
            total = max(sum(seen.values()), 1)
            for i, label in enumerate(self.labels):
                out[f"progress/{label}/ratio_{kind}"] = seen.get(i, 0) / total
        return out

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        self.policy.eval()
        nll, count = torch.zeros((), dtype=torch.float64, device=self.dist.device), 0
        for start in range(0, len(self.val), VAL_ROWS_PER_COPY):
            for row in rows_to_device(self.val[start : start + VAL_ROWS_PER_COPY], self.dist.device):
                nll += self._forward_nll(row)
                count += row.loss_tokens
        nll, count = all_sum([float(nll), float(count)], self.dist)
        loss = nll / max(count, 1)
        return {"val/loss": loss, "val/perplexity": math.exp(min(loss, 20.0))}

    def save(self, final: bool) -> None:
        step = self.progress["step"]
        if not layout.save_due(self.config.ckpt, step, final):
            return
        step_dir = layout.step_dir(self.ckpt_root, step)
        t0 = time.perf_counter()
        meta = {"model": self.config.model.name, "tokenizer": self.config.tokenizer.name or self.config.model.name}
        loader_state = self.loader.state_dict()
        adapter = self.adapter.config if self.adapter is not None else None
        parts = (self.hf, self.optimizer, self.scheduler, self.progress, loader_state)
        ckpt.save(step_dir, *parts, self.dist.rank, meta, adapter)
        if self.dist.world > 1:
            tdist.barrier()
        if self.dist.is_main:
            layout.retain(self.ckpt_root, self.config.ckpt, layout.COMPONENTS["sft"], upto=step)
            emit(self.monitors, {"time/save_ckpt": time.perf_counter() - t0}, step)

    def _should_validate(self, step: int) -> bool:
        v = self.config.val
        return v is not None and (step % v.interval == 0 or step == self.total)

    def start_broadcasts(self) -> None:
        """With online eval: announce the versions this run broadcasts (:mod:`prl.evalplan`)
        and publish the weights training starts from."""
        from prl.evalplan import eval_versions, write_plan

        start, interval = self.progress["step"], self.config.eval.interval
        if self.dist.is_main:
            versions = write_plan(self.run_dir, start, self.total, interval)
        else:
            versions = eval_versions(start, self.total, interval)
        self.broadcast_at = set(versions[1:])
        publish_weights(self.hf, self.transport, self.dist, start)

    def train(self) -> None:
        """Steps until ``max_steps`` (total, also on resume) or the end of the epoch."""
        if self.config.val is not None and self.config.val.eval_on_start and self.progress["step"] == 0:
            emit(self.monitors, self.validate(), 0)
        if self.transport is not None:
            self.start_broadcasts()
        while self.progress["step"] < self.total:
            metrics = self.train_step()
            step = self.progress["step"]
            if self.gc.interval is not None:
                metrics["time/gc"] = self.gc.step(step)
            if self._should_validate(step):
                metrics.update(self.validate())
            if step in self.broadcast_at:
                metrics["time/broadcast_weights"] = publish_weights(self.hf, self.transport, self.dist, step)
            emit(self.monitors, metrics, step)
            self._report(step, metrics)
            self.save(final=step == self.total)

    def _report(self, step: int, m: dict[str, float]) -> None:
        if not self.dist.is_main:
            return
        info = f"loss {m['loss/mean']:.4f} lr {m['optim/lr']:.2e} {m['perf/throughput']:.0f} tok/s"
        if "val/loss" in m:
            info += f" val {m['val/loss']:.4f}"
        self.bar.update(step, info)
        if self.bar.bar is None:
            log.info("step %d/%d %s gnorm %.3f", step, self.total, info, m["optim/grad_norm"])

    def close(self) -> None:
        self.gc.close()
        self.loader.close()
        self.bar.close()
        for m in self.monitors:
            m.close()
        if self.dist.world > 1 and tdist.is_initialized():
            tdist.destroy_process_group()


def run(config: SFTConfig) -> int:
    """Run SFT in this process (one rank)."""
    return run_here(SFTRun, config)


def main(argv: list[str] | None = None) -> int:
    from prl.config.roots import SFTConfig

    return rank_main(argv, "prl_trainer_torch.sft", "sft.json", SFTConfig, SFTRun)


if __name__ == "__main__":
    sys.exit(main())
