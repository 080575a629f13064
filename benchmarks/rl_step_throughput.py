"""The trainer's real RL step, timed: tokens/s of ``prl_trainer_torch.rl.RLRun.train_step``.

Unlike ``trainer_throughput.py`` (its own loss and packer), this runs the code a user's run
runs. Per step, the documents (64-2048 tokens, uniform; the first quarter of each is prompt,
outside the loss mask) become ``TrainingSample``s, are packed by the orchestrator's packer
(``prl.orchestrator.packing.pack``) and written by its filesystem rollout transport as the
msgpack file the trainer reads. ``RLRun.train_step`` then does everything a real step does:
read and decode the batch, build the micro-batch tensors, forward/backward with the ``ipo``
loss plugin and the ce/ref_kl components, per-env statistics, annotations, gradient
clipping, AdamW, the scheduler, and the step's metrics. The clock covers all of it.

Baselines, measured in the same process on the same documents (``trainer_throughput.py``):

* ``plain``: a transformers loop that PADS: documents padded into micro-batches of at most
  ``--plain-tokens`` padded tokens, SDPA with a padding mask, full logits, full-vocabulary
  log-softmax, no compile.
* ``packed``: the strong simple baseline: the same packed rows without padding (flash
  attention varlen over the documents, prl's chunked log-prob), its own RL loss, NOT compiled.

    python benchmarks/rl_step_throughput.py --out /tmp/rl_step.json        # one GPU
    python benchmarks/rl_step_throughput.py --tiny --steps 3 --warmup 1    # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trainer_throughput as tt  # noqa: E402


def samples_of(docs: list[dict]) -> list:
    """The orchestrator's view of ``docs``: one TrainingSample each, the first quarter prompt."""
    from prl.types import TrainingSample

    out = []
    for i, d in enumerate(docs):
        ids = d["ids"].tolist()
        n = len(ids)
        prompt = max(1, n // 4)
        mask = [False] * prompt + [True] * (n - prompt)
        adv = float(d["adv"][0])
        out.append(
            TrainingSample(
                input_ids=ids, loss_mask=mask, advantages=[adv] * n,
                inference_logprobs=d["inf_lp"].tolist(), temperature=1.0,
                rl_weights=[1.0] * n, ce_weights=[0.0] * n, ref_kl_weights=[0.0] * n,
                env_name="bench", trace_id=f"t{i}", branch_index=0,
            )
        )  # fmt: skip
    return out


def trainer_config(model_dir: Path, out: Path, v: dict, steps: int):
    from prl.config.components import TrainerConfig

    return TrainerConfig.model_validate(
        {
            "model": {
                "name": str(model_dir), "seq_len": v["seq"], "dtype": "bfloat16",
                "activation_checkpointing": v["ac"], "activation_checkpointing_freq": v["freq"],
                "optim_cpu_offload": v["offload"],
            },
            "loss": {"type": "ipo"},
            "optim": {"lr": 1e-6, "max_norm": 1.0},
            "max_steps": steps,
            "annotations": v["annotations"],
            "output_dir": str(out), "run": {"name": "rl-step-bench"},
        }
    )  # fmt: skip


def parse_variant(text: str, args) -> dict:
    """``name=ac8k,ac=1,freq=2,seq=8192,offload=0,annotations=1``; unset keys from the flags."""
    v = {
        "ac": not args.no_ac, "freq": 1, "seq": args.seq_len, "offload": not args.no_optim_offload,
        "annotations": not args.no_annotations,
    }  # fmt: skip
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        v[key] = value if key == "name" else int(value)
    for key in ("ac", "offload", "annotations"):
        v[key] = bool(v[key])
    v.setdefault("name", "rl_step")
    return v


def run_rl_step(cfg, steps_docs, args, work: Path, model_dir: Path, v: dict, prepare=None) -> dict:
    """Write each step's batch as the orchestrator does, then time ``RLRun.train_step``.
    ``prepare(run)``, when given, adjusts the built run before its first step."""
    from prl_trainer_torch.metrics import model_flops, peak_memory_gib
    from prl_trainer_torch.rl import RLRun

    from prl.orchestrator.packing import pack
    from prl.orchestrator.transport import write_batch

    print(f"== {v}", flush=True)
    run = RLRun(trainer_config(model_dir, work / v["name"], v, len(steps_docs)))
    if prepare is not None:
        prepare(run)
    dev = run.dist.device
    times, losses, flops, host = [], [], [], []
    tt._reset(dev)
    for step, docs in enumerate(steps_docs, start=1):
        t_pack = time.perf_counter()
        write_batch(run.run_dir, step, pack(samples_of(docs), v["seq"], 1))
        host.append(time.perf_counter() - t_pack)
        tt._sync(dev)
        profiling = args.profile and step == len(steps_docs)
        t0 = time.perf_counter()
        with _profiler(profiling, args.stacks) as prof:
            metrics = run.train_step(step)
            tt._sync(dev)
        times.append(time.perf_counter() - t0)
        losses.append(metrics.get("loss/all", float("nan")))
        flops.append(model_flops(run.n_params, cfg.num_hidden_layers, cfg.hidden_size, [len(d["ids"]) for d in docs]))
        print(
            f"{v['name']} step {step}: {times[-1]:.3f} s ({sum(len(d['ids']) for d in docs) / times[-1]:,.0f} tok/s), "
            f"forward_backward {metrics['time/forward_backward']:.3f} s, wait_for_batch "
            f"{metrics['time/wait_for_batch']:.3f} s, orchestrator pack+write {host[-1]:.3f} s",
            flush=True,
        )
        if profiling:
            _print_profile(prof, times[-1], args.stacks)
    n = len(steps_docs) - args.profile  # the profiled step is not timed
    out = tt._summary(v["name"], losses[:n], times[:n], flops[:n], steps_docs[:n], args, dev, 1)
    out["peak_memory_gib"] = peak_memory_gib(dev)
    out["variant"] = v
    out["orchestrator_pack_write_s"] = host
    run.close()
    del run
    return out


def _profiler(on: bool, stacks: bool = False):
    import contextlib

    if not on:
        return contextlib.nullcontext()
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    return profile(activities=acts, with_stack=stacks)


# host calls that wait for (or hand work to) the GPU: with --stacks, where in prl's code each comes from
WAITS = ("cudaMemcpyAsync", "cudaStreamSynchronize", "Command Buffer Full", "cudaMemsetAsync")


def _print_stacks(prof) -> None:
    rows = [e for e in prof.key_averages(group_by_stack_n=12) if e.key in WAITS]
    rows.sort(key=lambda e: -e.self_cpu_time_total)
    for e in rows[:20]:
        frames = [f for f in e.stack if "prl" in f or "benchmarks" in f or "transformers" in f][:6]
        print(f"{e.key}: {e.count} calls, {e.self_cpu_time_total / 1e3:.1f} ms host")
        for f in frames:
            print(f"    {f}")


def _print_profile(prof, wall: float, stacks: bool = False) -> None:
    """How busy the GPU was during the profiled step, and where the host spent its time."""
    if stacks:
        _print_stacks(prof)
    events = prof.key_averages()
    # "Command Buffer Full" is the host waiting for room in the launch queue, not a kernel
    gpu = sum(e.self_device_time_total for e in events if e.key != "Command Buffer Full") / 1e6
    print(f"profiled step: wall {wall:.3f} s, GPU kernel time {gpu:.3f} s ({gpu / wall:.0%} busy)")
    print(events.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=50))
    if torch.cuda.is_available():
        print(events.table(sort_by="self_cuda_time_total", row_limit=15, max_name_column_width=50))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--tokens-per-step", type=int, default=32768)
    p.add_argument("--seq-len", type=int, default=16384, help="the trainer's micro-batch length (model.seq_len)")
    p.add_argument("--plain-tokens", type=int, default=8192)
    p.add_argument("--chunk", type=int, default=2048)
    p.add_argument("--no-ac", action="store_true", help="no activation checkpointing (more memory)")
    p.add_argument("--no-optim-offload", action="store_true", help="model.optim_cpu_offload = false")
    p.add_argument("--no-annotations", action="store_true", help="trainer.annotations = false")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        help="rl_step settings, repeatable: name=X,ac=0|1,freq=N,seq=N,offload=0|1,annotations=0|1",
    )
    p.add_argument("--profile", action="store_true", help="profile one extra rl_step step per variant")
    p.add_argument("--stacks", action="store_true", help="with --profile: where host waits come from")
    p.add_argument("--only", default="rl_step,packed,plain", help="comma list of rl_step, packed, plain")
    p.add_argument("--tiny", action="store_true", help="a 2-layer model (CPU smoke test)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    cfg = tt.tiny_config() if args.tiny else tt.qwen3_06b_config()
    steps_docs = tt.make_docs(args.steps + args.profile, args.tokens_per_step, cfg.vocab_size)
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    state = hf.state_dict()
    wanted = args.only.split(",")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        hf.save_pretrained(model_dir)
        del hf
        if "rl_step" in wanted:
            for text in args.variant or [""]:
                results.append(run_rl_step(cfg, steps_docs, args, Path(tmp), model_dir, parse_variant(text, args)))
                _free()
    steps_docs = steps_docs[: args.steps]
    if "packed" in wanted:
        packed_args = argparse.Namespace(**{**vars(args), "compile": False, "attn": "auto", "profile": False})
        packed_args.mem_report = False
        dist = tt.init_distributed()
        res = tt.run_prl(cfg, steps_docs, packed_args, dist, state)
        res["name"] = "packed_no_compile"
        results.append(res)
        _free()
    if "plain" in wanted:
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        res = tt.run_plain(cfg, steps_docs, args, dev, state)
        print(json.dumps(res), flush=True)
        results.append(res)
    _report(results)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


def _free() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _report(results: list[dict]) -> None:
    by = {r["name"]: r for r in results}
    for r in results:
        print(
            f"{r['name']:>18}: {r['tokens_per_s']:>9,.0f} tokens/s  MFU {r['mfu']:.1%}  "
            f"peak {r['peak_memory_gib']:.2f} GiB  first-step loss {r['losses'][0]:.4f}"
        )
    for r in results:
        if "variant" not in r:
            continue
        for name in ("packed_no_compile", "plain"):
            if name in by:
                print(f"{r['name']} / {name}: {r['tokens_per_s'] / by[name]['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
