"""Trainer throughput: prl's torch trainer vs a plain transformers loop, same data, one GPU.

Model: the Qwen3-0.6B architecture, random init (config built here, nothing downloaded),
bf16 parameters. Data: documents of 64-2048 tokens (uniform), 32k tokens per step, with an
RL-style objective on every token:

    logp, H = per-token log-probabilities (temperature-scaled) and entropy
    loss = -sum(exp(logp - logp_inference) * advantage) / tokens

prl: documents packed into rows of at most ``--seq-len`` tokens (position ids restart per
document; flash-attention varlen over the documents on GPU), log-probs chunked from hidden
states by a fused autograd function, activation checkpointing, compiled decoder layers.
plain: documents padded into micro-batches of at most ``--plain-tokens`` padded tokens,
SDPA with a padding mask, full logits and a full-vocabulary log-softmax.

Prints tokens/s, MFU (model FLOPs, see prl_trainer_torch.metrics) and peak memory of each,
plus the first step's loss of both (same weights, same data: they must agree).

    PYTHONPATH=plugins/trainer-torch/src python benchmarks/trainer_throughput.py
    # FSDP2 check: same losses on 1 and 2 processes
    torchrun --nproc-per-node 2 benchmarks/trainer_throughput.py --fsdp-check
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "trainer-torch" / "src"))

from prl_trainer_torch.metrics import model_flops, peak_flops, peak_memory_gib  # noqa: E402
from prl_trainer_torch.model import count_params, init_distributed, load_hf_model, parallelize  # noqa: E402


def qwen3_06b_config():
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        rms_norm_eps=1e-6,
    )


def tiny_config():
    """A 2-layer model of the same family: CPU smoke tests of the benchmarks."""
    cfg = qwen3_06b_config()
    small = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
    heads = {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "layer_types": None}
    return type(cfg)(**{**cfg.to_dict(), **small, **heads})


def make_docs(steps: int, tokens_per_step: int, vocab: int, seed: int = 0) -> list[list[dict]]:
    """Per step, documents of 64-2048 tokens summing to tokens_per_step."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        docs, total = [], 0
        while total < tokens_per_step:
            n = min(int(torch.randint(64, 2049, (1,), generator=g)), tokens_per_step - total)
            ids = torch.randint(0, vocab, (n + 1,), generator=g)
            docs.append(
                {
                    "ids": ids[:-1],
                    "targets": ids[1:],
                    "adv": torch.randn(1, generator=g).expand(n).clone(),
                    "inf_lp": -torch.rand(n, generator=g) * 0.2 - float(torch.log(torch.tensor(float(vocab)))),
                }
            )
            total += n
        out.append(docs)
    return out


def pack_rows(docs: list[dict], seq_len: int) -> list[dict]:
    """Greedy packing into rows of at most seq_len tokens. Rows are not padded: each goes
    through the model alone, as the trainer's micro-batches do."""
    rows, cur = [], []

    def flush():
        rows.append(
            {
                **{k: torch.cat([d[k] for d in cur]) for k in ("ids", "targets", "adv", "inf_lp")},
                "pos": torch.cat([torch.arange(len(d["ids"])) for d in cur]),
                "mask": torch.ones(sum(len(d["ids"]) for d in cur), dtype=torch.bool),
                "docs": [len(d["ids"]) for d in cur],
            }
        )

    for d in docs:
        if cur and sum(len(x["ids"]) for x in cur) + len(d["ids"]) > seq_len:
            flush()
            cur = []
        cur.append(d)
    flush()
    return rows


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _reset(dev):
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)


def rl_loss(logp, adv, inf_lp, mask, n_tokens):
    ratio = torch.exp(logp - inf_lp)
    return -(ratio * adv * mask).sum() / n_tokens


def run_prl(cfg, steps_docs, args, dist, state=None) -> dict:
    hf = load_hf_model("", torch.bfloat16, args.attn, config=cfg)
    if state is not None:
        hf.load_state_dict(state)
    n_params = count_params(hf)[1]
    policy = parallelize(hf, dist, activation_checkpointing=not args.no_ac, chunk_size=args.chunk, compile=args.compile)
    policy.train()  # activation checkpointing only acts in training mode
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-5, weight_decay=0.0)
    dev = dist.device
    losses, times, flops = [], [], []
    _reset(dev)
    for docs in steps_docs:
        rows = pack_rows(docs, args.seq_len)
        while len(rows) % dist.world:  # FSDP ranks must run the same number of passes
            rows.append({**rows[-1], "mask": torch.zeros_like(rows[-1]["mask"])})
        mine = rows[dist.rank :: dist.world]
        n_tok = sum(len(d["ids"]) for d in docs)
        _sync(dev)
        t0 = time.perf_counter()
        total = _prl_passes(policy, mine, dev, n_tok, dist.world)
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dist.world > 1:
            torch.distributed.all_reduce(total)
        _sync(dev)
        times.append(time.perf_counter() - t0)
        losses.append(float(total))
        flops.append(model_flops(n_params, cfg.num_hidden_layers, cfg.hidden_size, [len(d["ids"]) for d in docs]))
    out = _summary("prl", losses, times, flops, steps_docs, args, dev, dist.world)
    if dist.is_main:
        print(json.dumps(out), flush=True)
        _print_compile_stats()
        try:  # diagnostics after the figures: a failure here must not lose them
            if args.profile:
                _profile_step(policy, steps_docs[-1], args, dev)
            if args.mem_report and dev.type == "cuda":
                _mem_report(policy, opt, steps_docs[-1], args, dev)
        except Exception as exc:  # noqa: BLE001
            print(f"diagnostics failed: {type(exc).__name__}: {exc}")
    return out


def _prl_passes(policy, rows, dev, n_tok, world) -> torch.Tensor:
    """Forward and backward over this rank's packed rows; the summed loss."""
    total = torch.zeros((), device=dev, dtype=torch.float32)
    for r in rows:
        b = {k: v.to(dev, non_blocking=True).unsqueeze(0) for k, v in r.items() if k != "docs"}
        temp = torch.ones_like(b["inf_lp"])
        logp, ent = policy(b["ids"], b["pos"], b["targets"], temp, entropy=True)
        loss = rl_loss(logp, b["adv"], b["inf_lp"], b["mask"], n_tok)
        (loss * world).backward()
        total += loss.detach()
    return total


def _mem_report(policy, opt, docs, args, dev) -> None:
    """One more step with the CUDA allocator's history on; prints the blocks alive at the
    step's peak, grouped by the first non-torch frame that allocated them."""
    n_tok = sum(len(d["ids"]) for d in docs)
    _sync(dev)
    base = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    _prl_passes(policy, pack_rows(docs, args.seq_len), dev, n_tok, 1)
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    _sync(dev)
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    events = snap["device_traces"][dev.index or 0]
    cur, best, best_i = 0, 0, -1
    for i, e in enumerate(events):
        cur += e["size"] if e["action"] == "alloc" else -e["size"] if e["action"] == "free_completed" else 0
        if cur > best:
            best, best_i = cur, i
    live: dict[int, dict] = {}
    for e in events[: best_i + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    groups: dict[str, list[int]] = {}
    for e in live.values():
        frames = [f for f in e.get("frames", []) if "/torch/" not in f["filename"]][:2]
        key = " <- ".join(f"{Path(f['filename']).name}:{f['line']} {f['name']}" for f in frames) or "?"
        groups.setdefault(key, []).append(e["size"])
    print(
        f"mem-report: allocated before the step {base / 2**30:.2f} GiB, peak in step "
        f"{(base + best) / 2**30:.2f} GiB (max_memory_allocated {torch.cuda.max_memory_allocated(dev) / 2**30:.2f})"
    )
    for key, sizes in sorted(groups.items(), key=lambda kv: -sum(kv[1]))[:14]:
        print(f"  {sum(sizes) / 2**30:7.3f} GiB  x{len(sizes):<4d} {key}")


def _profile_step(policy, docs, args, dev) -> None:
    """One more step under the profiler: the top GPU kernels by time."""
    from torch.profiler import ProfilerActivity, profile

    n_tok = sum(len(d["ids"]) for d in docs)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for r in pack_rows(docs, args.seq_len):
            b = {k: v.to(dev).unsqueeze(0) for k, v in r.items() if k != "docs"}
            logp, _ = policy(b["ids"], b["pos"], b["targets"], torch.ones_like(b["inf_lp"]), entropy=True)
            rl_loss(logp, b["adv"], b["inf_lp"], b["mask"], n_tok).backward()
        _sync(dev)
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=30, max_name_column_width=60))


def _print_compile_stats() -> None:
    from torch._dynamo.utils import counters

    stats = {k: dict(v) for k, v in counters.items() if k in ("stats", "recompiles") and v}
    if stats:
        print("dynamo:", json.dumps(stats))


def run_plain(cfg, steps_docs, args, dev, state, experts: str | None = None, name: str = "plain") -> dict:
    """The padded transformers loop; ``experts`` picks an MoE model's experts implementation
    (transformers' own default when None: ``grouped_mm`` where it can run)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa").to(dev)
    model.load_state_dict(state)
    if experts is not None:
        model.set_experts_implementation(experts)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0)
    losses, times, flops = [], [], []
    n_params = count_params(model)[1]
    _reset(dev)
    for docs in steps_docs:
        n_tok = sum(len(d["ids"]) for d in docs)
        _sync(dev)
        t0 = time.perf_counter()
        total = 0.0
        for batch in _padded_batches(docs, args.plain_tokens):
            width = max(len(d["ids"]) for d in batch)

            def pad(k, fill, batch=batch, width=width):
                rows = [torch.nn.functional.pad(d[k], (0, width - len(d[k])), value=fill) for d in batch]
                return torch.stack(rows).to(dev)

            ids, tgt, adv, inf = pad("ids", 0), pad("targets", 0), pad("adv", 0.0), pad("inf_lp", 0.0)
            attn = torch.stack([torch.arange(width) < len(d["ids"]) for d in batch]).to(dev)
            logits = model(input_ids=ids, attention_mask=attn.long(), use_cache=False).logits
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            logp = logprobs.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
            _entropy = -(logprobs.exp() * logprobs).sum(-1)
            loss = rl_loss(logp, adv, inf, attn, n_tok)
            loss.backward()
            total += float(loss.detach())
            del logits, logprobs, logp, _entropy, loss
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(dev)
        times.append(time.perf_counter() - t0)
        losses.append(total)
        flops.append(model_flops(n_params, cfg.num_hidden_layers, cfg.hidden_size, [len(d["ids"]) for d in docs]))
    return _summary(name, losses, times, flops, steps_docs, args, dev, 1)


def _padded_batches(docs, budget):
    batch = []
    for d in docs:
        width = max([len(x["ids"]) for x in batch] + [len(d["ids"])])
        if batch and width * (len(batch) + 1) > budget:
            yield batch
            batch = []
        batch.append(d)
    if batch:
        yield batch


def _summary(name, losses, times, flops, steps_docs, args, dev, world) -> dict:
    w = args.warmup
    tokens = sum(len(d["ids"]) for docs in steps_docs[w:] for d in docs)
    secs = sum(times[w:])
    peak = peak_flops(dev) or float("nan")
    return {
        "name": name,
        "tokens_per_s": tokens / secs,
        "mfu": sum(flops[w:]) / secs / (peak * world),
        "peak_memory_gib": peak_memory_gib(dev),
        "losses": losses,
        "step_s": times,
        "world": world,
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--tokens-per-step", type=int, default=32768)
    p.add_argument("--seq-len", type=int, default=16384)
    p.add_argument("--plain-tokens", type=int, default=8192)
    p.add_argument("--chunk", type=int, default=2048)
    p.add_argument("--attn", default="auto", help="auto = prl_varlen on CUDA (torch >= 2.10), else sdpa")
    p.add_argument("--no-ac", action="store_true")
    p.add_argument("--compile", type=int, default=None, help="compile decoder layers (default: on GPU)")
    p.add_argument("--only", choices=["prl", "plain", "both"], default="both")
    p.add_argument("--fsdp-check", action="store_true", help="prl only, under torchrun; print per-step losses")
    p.add_argument("--out", default=None)
    p.add_argument("--profile", action="store_true", help="profile one extra step (prl)")
    p.add_argument("--mem-report", action="store_true", help="one extra step (prl): what is alive at peak memory")
    p.add_argument("--tiny", action="store_true", help="a 2-layer model (CPU smoke test)")
    args = p.parse_args()
    dist = init_distributed()
    cfg = tiny_config() if args.tiny else qwen3_06b_config()
    steps_docs = make_docs(args.steps, args.tokens_per_step, cfg.vocab_size)
    torch.manual_seed(0)
    # One random init (seeded, on CPU) shared by every run so losses are comparable.
    from transformers import AutoModelForCausalLM

    state = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).state_dict()
    results = []
    if args.fsdp_check or args.only in ("prl", "both"):
        results.append(run_prl(cfg, steps_docs, args, dist, state))
    if not args.fsdp_check and args.only in ("plain", "both"):
        if dist.device.type == "cuda":
            torch.cuda.empty_cache()
        results.append(run_plain(cfg, steps_docs, args, dist.device, state))
    if dist.is_main:
        if results and results[-1]["name"] == "plain":
            print(json.dumps(results[-1]))
        if len(results) == 2:
            print(f"speedup prl/plain: {results[0]['tokens_per_s'] / results[1]['tokens_per_s']:.2f}x")
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1))
    if dist.world > 1:
        torch.distributed.barrier()  # no rank tears gloo/NCCL down while another still talks
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
