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


def trainer_config(model_dir: Path, out: Path, args, steps: int):
    from prl.config.components import TrainerConfig

    return TrainerConfig.model_validate(
        {
            "model": {
                "name": str(model_dir), "seq_len": args.seq_len, "dtype": "bfloat16",
                "activation_checkpointing": not args.no_ac,
                "optim_cpu_offload": not args.no_optim_offload,
            },
            "loss": {"type": "ipo"},
            "optim": {"lr": 1e-6, "max_norm": 1.0},
            "max_steps": steps,
            "annotations": not args.no_annotations,
            "output_dir": str(out), "run": {"name": "rl-step-bench"},
        }
    )  # fmt: skip


def run_rl_step(cfg, steps_docs, args, work: Path, state) -> dict:
    """Write each step's batch as the orchestrator does, then time ``RLRun.train_step``."""
    from prl_trainer_torch.metrics import model_flops, peak_memory_gib
    from prl_trainer_torch.rl import RLRun
    from transformers import AutoModelForCausalLM

    from prl.orchestrator.packing import pack
    from prl.orchestrator.transport import write_batch

    model_dir = work / "model"
    hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    hf.load_state_dict(state)
    hf.save_pretrained(model_dir)
    del hf
    config = trainer_config(model_dir, work, args, len(steps_docs))
    run = RLRun(config)
    run_dir = run.run_dir
    dev = run.dist.device
    n_params = run.n_params
    times, losses, flops, host = [], [], [], []
    tt._reset(dev)
    for step, docs in enumerate(steps_docs, start=1):
        t_pack = time.perf_counter()
        write_batch(run_dir, step, pack(samples_of(docs), args.seq_len, 1))
        host.append(time.perf_counter() - t_pack)
        tt._sync(dev)
        t0 = time.perf_counter()
        metrics = run.train_step(step)
        tt._sync(dev)
        times.append(time.perf_counter() - t0)
        losses.append(metrics.get("loss/all", float("nan")))
        flops.append(model_flops(n_params, cfg.num_hidden_layers, cfg.hidden_size, [len(d["ids"]) for d in docs]))
        print(
            f"rl-step {step}: {times[-1]:.3f} s ({sum(len(d['ids']) for d in docs) / times[-1]:,.0f} tok/s), "
            f"forward_backward {metrics['time/forward_backward']:.3f} s, wait_for_batch "
            f"{metrics['time/wait_for_batch']:.3f} s, orchestrator pack+write {host[-1]:.3f} s",
            flush=True,
        )
    out = tt._summary("rl_step", losses, times, flops, steps_docs, args, dev, 1)
    out["peak_memory_gib"] = peak_memory_gib(dev)
    out["orchestrator_pack_write_s"] = host
    run.close()
    return out


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
    p.add_argument("--only", default="rl_step,packed,plain", help="comma list of rl_step, packed, plain")
    p.add_argument("--tiny", action="store_true", help="a 2-layer model (CPU smoke test)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    cfg = tt.tiny_config() if args.tiny else tt.qwen3_06b_config()
    steps_docs = tt.make_docs(args.steps, args.tokens_per_step, cfg.vocab_size)
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM

    state = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).state_dict()
    wanted = args.only.split(",")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        if "rl_step" in wanted:
            results.append(run_rl_step(cfg, steps_docs, args, Path(tmp), state))
            _free()
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
    base = by.get("rl_step")
    for name in ("packed_no_compile", "plain"):
        if base and name in by:
            print(f"rl_step / {name}: {base['tokens_per_s'] / by[name]['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
