"""The trainer's real RL step on a Mixture-of-Experts model, timed against transformers.

The model is Qwen3-30B-A3B's shape (vocabulary 151,936, hidden 2,048, 32 query / 4 KV heads
of 128, 128 experts of width 768 per layer, top-8 with ``norm_topk_prob``) cut to
``--layers`` decoder layers (8: 5.6B parameters, 0.9B of them used per token), random
weights, bf16. Every variant trains on the same documents (64-2048 tokens, as in
``rl_step_throughput.py``) and reports tokens/s over the steps after ``--warmup``, MFU
counting ACTIVE parameters only (a token's matmuls touch its k experts, not all of them:
``prl_trainer_torch.model.count_params``) and peak GPU memory.

Variants (``--only``):

* ``rl_step``: prl's RL step (``RLRun.train_step``: the batch file the orchestrator writes,
  packed varlen rows, the ``ipo`` loss, clipping, AdamW), the experts run by transformers'
  experts implementation (``grouped_mm`` on a GPU): what ``prl rl`` runs with ``ep = 1``.
* ``ep_grouped`` / ``ep_loop``: the same step with prl's expert-parallel experts
  (``model.ep``'s layer, on a group of one rank: its dispatch and its ``expert_mlp``) run
  as one grouped GEMM per projection, or as prl's loop over the experts.
* ``hf_grouped_mm``: transformers' own fastest MoE path in a plain training loop: PADDED
  micro-batches of at most ``--plain-tokens`` tokens, SDPA, full-vocabulary log-softmax,
  ``experts_implementation="grouped_mm"``, no compile (``batched_mm`` asks for terabytes at
  this size). ``hf_eager`` is the same loop with transformers' loop over experts.
* ``packed``: the packed varlen loop of ``trainer_throughput.py`` (no compile), a strong
  simple baseline with transformers' experts.

    python benchmarks/moe_step_throughput.py --out /tmp/moe.json          # one GPU
    python benchmarks/moe_step_throughput.py --tiny --steps 3 --warmup 1  # CPU smoke test
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rl_step_throughput as rs  # noqa: E402
import trainer_throughput as tt  # noqa: E402

ALL = "rl_step,ep_grouped,ep_loop,hf_grouped_mm"


def moe_config(layers: int, tiny: bool):
    from transformers import Qwen3MoeConfig

    shape = dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
        num_experts_per_tok=8, max_position_embeddings=40960, rope_theta=1e6,
    )  # fmt: skip
    if tiny:
        shape.update(
            vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
            num_attention_heads=2, num_key_value_heads=1, head_dim=32, num_experts=8, num_experts_per_tok=2,
        )  # fmt: skip
    return Qwen3MoeConfig(
        **shape, num_hidden_layers=layers, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        tie_word_embeddings=False, rms_norm_eps=1e-6, output_router_logits=False,
    )  # fmt: skip


def ep_on_one_rank(mode: str):
    """``prepare`` for :func:`rl_step_throughput.run_rl_step`: swap in prl's expert-parallel
    experts on a one-rank group (what ``model.ep`` installs and places on every rank), with
    ``expert_mlp`` as ``mode`` (``grouped`` or ``loop``)."""
    import torch.distributed as tdist
    from prl_trainer_torch import expert_parallel as ep

    def prepare(run) -> None:
        if not tdist.is_initialized():
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29533")
            backend = "nccl" if run.dist.device.type == "cuda" else "gloo"
            tdist.init_process_group(backend, rank=0, world_size=1)
        ep.GROUPED_GEMM = mode
        layers = ep.install_expert_parallel(run.hf, 1, "bench")
        for module in run.hf.modules():
            if isinstance(module, ep.ExpertParallelExperts):
                module.group, module.replicas, module.world = tdist.group.WORLD, None, 1
        print(f"prl expert-parallel experts in {layers} layers, expert_mlp = {mode}", flush=True)

    return prepare


def run_variant(name: str, cfg, steps_docs, args, work: Path, model_dir: Path, state) -> dict:
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"=== {name}", flush=True)
    if name in ("rl_step", "ep_grouped", "ep_loop"):
        v = rs.parse_variant(f"name={name}", args)
        prepare = None if name == "rl_step" else ep_on_one_rank(name.removeprefix("ep_"))
        if name != "rl_step":  # the profile of one step is enough
            steps_docs, args = steps_docs[: args.steps], argparse.Namespace(**{**vars(args), "profile": False})
        return rs.run_rl_step(cfg, steps_docs, args, work, model_dir, v, prepare)
    docs = steps_docs[: args.steps]
    if name == "packed":
        packed = {"compile": False, "attn": "auto", "profile": False, "mem_report": False}
        out = tt.run_prl(cfg, docs, argparse.Namespace(**{**vars(args), **packed}), tt.init_distributed(), state)
        out["name"] = "packed"
        return out
    experts = name.removeprefix("hf_")
    return tt.run_plain(cfg, docs, args, dev, state, experts=experts, name=name)


def _measure(name, *a) -> dict:
    """One variant; an out-of-memory error is a result (this size does not fit), not a crash."""
    t0 = time.perf_counter()
    try:
        out = run_variant(name, *a)
    except torch.OutOfMemoryError as exc:
        out = {"name": name, "error": f"out of memory: {str(exc).splitlines()[0]}"}
    out["wall_s"] = time.perf_counter() - t0
    # compiled graphs keep the last run's model (and its optimizer state) alive: a later
    # variant ran out of memory on an H100 until they were dropped
    torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    print(json.dumps({k: v for k, v in out.items() if k not in ("losses", "step_s")}), flush=True)
    return out


def build_model(cfg, model_dir: Path):
    """Random weights made on the GPU (fast), saved for the prl runs; their CPU copy for the
    transformers loops."""
    from prl_trainer_torch.model import count_params
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with dev:
        hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    total, active = count_params(hf)
    print(f"model: {cfg.num_hidden_layers} layers, {total / 1e9:.2f}B parameters, {active / 1e9:.2f}B active per token")
    hf.save_pretrained(model_dir)
    state = {k: v.cpu() for k, v in hf.state_dict().items()}
    del hf
    return state


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--tokens-per-step", type=int, default=32768)
    p.add_argument("--seq-len", type=int, default=16384, help="the trainer's micro-batch length (model.seq_len)")
    p.add_argument("--plain-tokens", type=int, default=8192, help="padded tokens per transformers micro-batch")
    p.add_argument("--chunk", type=int, default=2048)
    p.add_argument("--no-ac", action="store_true", help="no activation checkpointing")
    p.add_argument("--optim-offload", action="store_true", help="model.optim_cpu_offload (default off here)")
    p.add_argument("--profile", action="store_true", help="profile one extra rl_step step")
    p.add_argument("--only", default=ALL, help=f"comma list of {ALL},packed,hf_eager")
    p.add_argument("--tiny", action="store_true", help="a 2-layer 8-expert model (CPU smoke test)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    args.no_optim_offload = not args.optim_offload
    args.no_annotations = False
    cfg = moe_config(2 if args.tiny else args.layers, args.tiny)
    steps_docs = tt.make_docs(args.steps + args.profile, args.tokens_per_step, cfg.vocab_size)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        state = build_model(cfg, model_dir)
        for name in args.only.split(","):
            results.append(_measure(name, cfg, steps_docs, args, Path(tmp), model_dir, state))
    report(results)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


def report(results: list[dict]) -> None:
    ok = {r["name"]: r for r in results if "error" not in r}
    for r in results:
        if "error" in r:
            print(f"{r['name']:>14}: {r['error']}")
            continue
        print(
            f"{r['name']:>14}: {r['tokens_per_s']:>9,.0f} tokens/s  MFU (active) {r['mfu']:.1%}  "
            f"peak {r['peak_memory_gib']:.2f} GiB  first-step loss {r['losses'][0]:.4f}"
        )
    for name in ("rl_step", "ep_grouped"):
        for base in ("hf_grouped_mm", "hf_eager", "packed", "ep_loop"):
            if name in ok and base in ok:
                print(f"{name} / {base}: {ok[name]['tokens_per_s'] / ok[base]['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
