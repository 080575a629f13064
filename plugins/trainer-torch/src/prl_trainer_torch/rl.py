"""The RL trainer loop (``docs/rl-loop.md``, ``docs/checkpoints.md``).

Versions: version ``v`` is the weights after step ``v``; the base model is version 0.

1. Start: build the model (float32 on CPU, FSDP2 when world > 1), AdamW with weight decay
   0 for ``weight_decay = "auto"``, the schedule over ``max_steps``; on resume restore model,
   optimizer, scheduler and progress from ``checkpoints/step_N/trainer`` and start at N + 1.
   Then publish the weights as version ``start − 1`` (0 for a fresh run) through the weight
   transport plugin, so inference and trainer agree before the first batch.
2. Each step S: wait for this rank's batch (the rollout transport's receiver), run
   the forward/backward of :mod:`prl_trainer_torch.rl_step`, clip the gradient norm to
   ``optim.max_norm``, step optimizer and scheduler, publish version S (the final step too:
   the orchestrator waits to acknowledge it), then save a checkpoint when due. With
   ``trainer.annotations`` on, each trained branch's per-token arrays go to the monitors
   (:mod:`prl_trainer_torch.annotations`).

The weight transport's handshake blocks until the orchestrator acknowledges a version, so
the trainer can never run more than one version ahead of inference. Every rank takes part
in gathering the full state dict; rank 0 alone publishes, logs metrics and prunes
checkpoints. The batch wait uses ``weight_broadcast.timeout``: both bound how long the
trainer waits on the orchestrator.

Run as ``python -m prl_trainer_torch.rl <resolved trainer.json>`` (what torchrun starts when
``prl trainer`` is called directly with ``num_workers > 1``).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as tdist

from prl import layout
from prl.contracts.monitor import build_monitors
from prl.orchestrator.rollout import open_receiver
from prl_trainer_torch import annotations as notes
from prl_trainer_torch import checkpoint as ckpt
from prl_trainer_torch.common import all_sum, publish_weights, run_dir_of
from prl_trainer_torch.entry import rank_main, run_here
from prl_trainer_torch.lora import maybe_adapter
from prl_trainer_torch.metrics import emit, model_flops, peak_flops, peak_memory_gib, perf_metrics
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
from prl_trainer_torch.rl_step import reduce_stats, run_micro_batches, to_micro_batch
from prl_trainer_torch.routing_replay import RouteReplay
from prl_trainer_torch.token_export import TokenExporter

if TYPE_CHECKING:  # annotations only
    from prl.config.components import TrainerConfig

log = logging.getLogger("prl.trainer")
RL_WEIGHT_DECAY = 0.0
# Schedules need a horizon; an unbounded run (no max_steps) keeps the warmup, then flat.
UNBOUNDED_STEPS = 10**9


def rl_resume_dir(config: TrainerConfig, root: Path) -> Path | None:
    """The step directory to restore. ``--resume`` alone takes the newest step that both the
    trainer and the orchestrator marked complete (the one the orchestrator picks too)."""
    return ckpt.resume_dir(config, root, layout.COMPONENTS["rl"])


class RLRun:
    """One RL trainer on this rank."""

    def __init__(self, config: TrainerConfig) -> None:
        self.config = config
        self.build_model(config)
        self._resume()
        self.loss_fn = config.loss.build()
        self.transport = config.weight_broadcast.build(run_dir=self.run_dir)
        self.batches = open_receiver(config.rollout_transport, self.run_dir, self.dist.rank)
        self.monitors = build_monitors(config, self.run_dir, "trainer") if self.dist.is_main else []
        self.exporter = None
        if getattr(config, "enable_token_export", False):
            self.exporter = TokenExporter(self.run_dir, self.dist.rank, self.dist.world, config.loss)
        self.annotator = None
        if notes.wanted(config):
            self.annotator = notes.AnnotationCollector(self.dist.rank, self.dist.world, config.loss.type)
        self.notes = notes.NoteWriter(self.monitors)

    def build_model(self, config: TrainerConfig) -> None:
        """Model, optimizer and schedule as a fresh run starts them (``prl replay`` of step 1
        builds them the same way, so the seeded parts, a LoRA adapter's init, match)."""
        self.dist = init_distributed()
        torch.manual_seed(config.seed)
        self.run_dir = run_dir_of(config)
        self.ckpt_root = ckpt.ckpt_root(config, self.run_dir)
        mcfg = config.model
        apply_runtime_knobs(mcfg)
        self.peak = peak_flops(self.dist.device)
        if getattr(mcfg, "vlm", None) is not None:
            self._build_vision_model(mcfg)
        else:
            self._build_text_model(mcfg)
        # perf/mfu: model FLOPs per step over the device's peak (prl_trainer_torch.metrics)
        text = self.hf.config.get_text_config()
        self.shape = (text.num_hidden_layers, text.hidden_size)
        self.gc = GarbageCollector(mcfg.gc)
        self.optimizer = build_optimizer(
            self.policy.parameters(), config.optim, RL_WEIGHT_DECAY, config.model, self.dist.device
        )
        self.total = config.max_steps
        self.scheduler = build_scheduler(self.optimizer, config.scheduler, self.total or UNBOUNDED_STEPS)
        self.progress = {"step": 0, "total_tokens": 0, "total_samples": 0}

    def _build_text_model(self, mcfg: Any) -> None:
        self.hf = load_hf_model(mcfg.name, resolve_dtype(mcfg.dtype, self.dist.device), mcfg.attn_implementation)
        self.n_params = count_params(self.hf)[1]
        self.adapter = maybe_adapter(self.hf, mcfg)  # [model.lora]: only the adapter trains
        setup_moe(self.hf, mcfg, rl=True)  # model.freeze_moe_router: auto freezes the routers in RL
        dp = mcfg.data_parallel(self.dist.world)
        self.policy = parallelize(
            self.hf, self.dist, mcfg.activation_checkpointing, dp=dp, ac_freq=mcfg.activation_checkpointing_freq
        )
        self.policy.routing = RoutingStats.of(self.hf, self.dist.device)
        if mcfg.routing_replay:  # its hooks run before the stats' (prepended): they count the experts used
            self.policy.route_replay = RouteReplay.of(self.hf, mcfg.name)

    def _build_vision_model(self, mcfg: Any) -> None:
        """``[model.vlm]``: the whole image-text model; rollouts' images reach its forward
        (:mod:`prl_trainer_torch.vision_rl`) and the published weights include the tower."""
        from prl_trainer_torch.vision_rl import build_vision_policy

        dtype = resolve_dtype(mcfg.dtype, self.dist.device)
        self.hf, self.policy, self.adapter = build_vision_policy(mcfg, self.dist, dtype)
        self.n_params = count_params(self.hf)[1]

    def _resume(self) -> None:
        step_dir = rl_resume_dir(self.config, self.ckpt_root)
        if step_dir is None:
            return
        res = self.config.resume
        lora = self.adapter is not None
        self.progress = ckpt.load(step_dir, self.hf, self.optimizer, self.scheduler, res, adapter_only=lora)
        if res.skip_scheduler:
            remaining = max((self.total or UNBOUNDED_STEPS) - self.progress["step"], 1)
            self.scheduler = build_scheduler(self.optimizer, self.config.scheduler, remaining)
        log.info("resumed from %s at step %d", step_dir, self.progress["step"])

    def publish(self, version: int) -> float:
        """Hand the current weights to inference as ``version``; returns the seconds taken."""
        return publish_weights(self.hf, self.transport, self.dist, version, self.adapter)

    def train_step(self, step: int) -> dict[str, float]:
        """Wait for batch ``step``, train on it; returns the step's metrics (all ranks)."""
        t0 = time.perf_counter()
        raw = self.batches.receive(step, timeout=self.config.weight_broadcast.timeout)
        t1 = time.perf_counter()
        if self.exporter is not None:
            self.exporter.begin(step)
            self.exporter.keep_batch(raw)
        if self.annotator is not None:
            self.annotator.begin(step)
        metrics, grad_norm, lr = self.learn(raw, notes.Fanout(self.exporter, self.annotator))
        t2 = time.perf_counter()
        tokens = metrics.pop("_tokens")
        self.progress["step"] = step
        self.progress["total_tokens"] += int(tokens)
        self.progress["total_samples"] += sum(len(r["seq_lens"]) for r in raw if any(r["loss_mask"]))
        docs = [int(n) for r in raw for n in r["seq_lens"]]
        (flops,) = all_sum([model_flops(self.n_params, *self.shape, docs)], self.dist)
        metrics.update(perf_metrics(flops, tokens, t2 - t1, self.dist.world, self.peak))
        metrics.update({
            "optim/lr": lr,
            "optim/grad_norm": float(grad_norm),
            "perf/peak_memory": peak_memory_gib(self.dist.device),
            "time/wait_for_batch": t1 - t0,
            "time/forward_backward": t2 - t1,
            "progress/num_tokens": float(self.progress["total_tokens"]),
        })  # fmt: skip
        if self.policy.routing is not None:
            metrics.update(self.policy.routing.step_metrics(self.dist.world))
        if self.exporter is not None:
            self.exporter.record(metrics)
        return metrics

    def learn(self, raw: list[dict[str, Any]], observer: Any = None) -> tuple[dict[str, float], float, float]:
        """One step on ``raw``'s micro-batches: forward, loss, backward, clipping, optimizer
        and scheduler step; returns (the step's loss metrics, pre-clip grad norm, the lr it
        used). ``prl replay`` recomputes a recorded step through exactly this."""
        self.policy.train()
        mbs = [to_micro_batch(r, self.dist.device) for r in raw]
        arm = getattr(self.optimizer, "arm", None)  # full offload: step during the last backward
        stats = run_micro_batches(self.policy, self.loss_fn, mbs, self.dist.world, observer, arm)
        if self.exporter is not None:
            self.exporter.finish()
        if self.annotator is not None:
            self.notes.write(self.annotator)  # built and written while the optimizer runs
        lr = self.optimizer.param_groups[0]["lr"]
        grad_norm = optimizer_step(self.optimizer, self.policy, self.config.optim.max_norm)
        self.scheduler.step()
        return reduce_stats(stats, self.dist.world), grad_norm, lr

    def save(self, final: bool) -> None:
        step = self.progress["step"]
        if not layout.save_due(self.config.ckpt, step, final):
            return
        self.notes.wait()  # a checkpointed step's annotations are on disk with it
        t0 = time.perf_counter()
        meta = {"model": self.config.model.name, "tokenizer": self.config.tokenizer.name or self.config.model.name}
        ckpt.save(
            layout.step_dir(self.ckpt_root, step),
            self.hf,
            self.optimizer,
            self.scheduler,
            self.progress,
            None,
            self.dist.rank,
            meta,
            self.adapter.config if self.adapter is not None else None,
        )
        if self.dist.world > 1:
            tdist.barrier()
        if self.dist.is_main:
            layout.retain(self.ckpt_root, self.config.ckpt, layout.COMPONENTS["rl"], upto=step)
            emit(self.monitors, {"time/save_ckpt": time.perf_counter() - t0}, step)

    def train(self) -> None:
        """Publish ``start − 1``, then step until ``max_steps`` (total, also on resume)."""
        start = self.progress["step"] + 1
        self.publish(start - 1)
        step = start
        while self.total is None or step <= self.total:
            t0 = time.perf_counter()
            metrics = self.train_step(step)
            metrics["time/broadcast_weights"] = self.publish(step)
            if self.gc.interval is not None:
                metrics["time/gc"] = self.gc.step(step)
            metrics["time/step"] = time.perf_counter() - t0
            emit(self.monitors, metrics, step)
            if self.dist.is_main:
                log.info(
                    "step %d loss %.4f entropy %.4f mismatch_kl %.2e grad_norm %.3f",
                    step, metrics.get("loss/all", 0.0), metrics.get("entropy/all/mean", 0.0),
                    metrics.get("mismatch_kl/all/mean", 0.0), metrics["optim/grad_norm"],
                )  # fmt: skip
            self.save(final=step == self.total)
            step += 1

    def close(self) -> None:
        self.notes.close()
        self.gc.close()
        for m in self.monitors:
            m.close()
        if self.dist.world > 1 and tdist.is_initialized():
            tdist.destroy_process_group()


def run(config: TrainerConfig) -> int:
    """Run the RL trainer in this process (one rank)."""
    return run_here(RLRun, config)


def main(argv: list[str] | None = None) -> int:
    from prl.config.components import TrainerConfig

    return rank_main(argv, "prl_trainer_torch.rl", "trainer.json", TrainerConfig, RLRun)


if __name__ == "__main__":
    sys.exit(main())
