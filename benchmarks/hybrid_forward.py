"""Qwen3.5's Gated DeltaNet layers in prl's packed trainer against transformers' own forward.

The same documents (lengths drawn from ``--min-doc``..``--max-doc`` until ``--tokens``) go
through the decoder stack of one randomly initialised Qwen3.5 text model, forward and
backward, three ways in this process:

* ``prl-packed``: one packed row, the documents' bounds handed to every layer
  (``prl_trainer_torch.hybrid``): on a GPU in bf16 with flash-linear-attention installed,
  its varlen kernels (``fla`` below), else the torch path that pads documents per layer;
* ``prl-packed-torch``: the same row with the fla kernels turned off (the CPU path; on a
  GPU with fla only with ``--torch-path``: torch's reference kernels are slow there);
* ``hf-padded``: transformers' forward on the documents right-padded into one batch with an
  attention mask (its own chunked kernels: fla's when installed, else torch's), the usual
  way to train a hybrid model without packing support.

The loss is the mean square of the last hidden state, so the output head (the same for all)
is left out. Printed: tokens/s of real tokens over ``--steps`` timed steps after one warm-up,
peak memory, and the largest difference of the last hidden state from transformers run on
each document alone (the ground truth of the state reset), relative to its scale.

    python benchmarks/hybrid_forward.py --device cuda --dtype bfloat16          # H100/H200
    python benchmarks/hybrid_forward.py --tiny --tokens 2048 --steps 2           # CPU smoke
"""

from __future__ import annotations

import argparse
import random
import time
from contextlib import contextmanager

import torch


def build(args):
    from transformers import AutoModelForCausalLM, Qwen3_5TextConfig

    w, layers = (192, 4) if args.tiny else (args.hidden, args.layers)
    heads = (2, 4, 32) if args.tiny else (16, 16, 128)  # key heads, value heads, head dim
    cfg = Qwen3_5TextConfig(
        vocab_size=4096 if args.tiny else 151936,
        hidden_size=w,
        intermediate_size=w * 3,
        num_hidden_layers=layers,
        num_attention_heads=4 if args.tiny else 8,
        num_key_value_heads=2,
        head_dim=64 if args.tiny else 256,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        linear_num_key_heads=heads[0],
        linear_num_value_heads=heads[1],
        linear_key_head_dim=heads[2],
        linear_value_head_dim=heads[2],
        max_position_embeddings=65536,
    )
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa").to(args.device)
    model.config.use_cache = False
    return model


def documents(args) -> list[int]:
    rng, lengths = random.Random(0), []
    while sum(lengths) < args.tokens:
        lengths.append(rng.randint(args.min_doc, args.max_doc))
    lengths[-1] -= sum(lengths) - args.tokens
    return [n for n in lengths if n > 0]


@contextmanager
def fla_off():
    from prl_trainer_torch import hybrid

    stock = hybrid._fla_kernels
    hybrid._fla_kernels = lambda: None
    try:
        yield
    finally:
        hybrid._fla_kernels = stock


def packed_inputs(ids: list[torch.Tensor], device):
    from prl_trainer_torch.attention import host_bounds

    pos = torch.cat([torch.arange(len(x)) for x in ids])
    cu, longest = host_bounds(pos.numpy())
    cu = torch.from_numpy(cu).to(device=device, dtype=torch.int32)
    kw = {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}
    return torch.cat(ids)[None].to(device), pos[None].to(device), kw


def run_packed(model, ids):
    inp, pos, kw = packed_inputs(ids, model.device)
    return model.get_decoder()(input_ids=inp, position_ids=pos, use_cache=False, **kw).last_hidden_state[0]


def run_padded(model, ids):
    longest = max(len(x) for x in ids)
    batch = torch.zeros(len(ids), longest, dtype=torch.long)
    mask = torch.zeros(len(ids), longest, dtype=torch.long)
    for i, x in enumerate(ids):
        batch[i, : len(x)], mask[i, : len(x)] = x, 1
    mask = mask.to(model.device)
    out = model.get_decoder()(input_ids=batch.to(model.device), attention_mask=mask, use_cache=False)
    return out.last_hidden_state[mask.bool()]  # real tokens, in document order


def run_alone(model, ids):
    dec = model.get_decoder()
    return torch.cat([dec(input_ids=x[None].to(model.device), use_cache=False).last_hidden_state[0] for x in ids])


def timed(name: str, fn, model, ids, args, truth):
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    if args.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(args.steps + 1):
        model.zero_grad(set_to_none=True)
        sync()
        t0 = time.perf_counter()
        hidden = fn(model, ids)
        hidden.float().pow(2).mean().backward()
        sync()
        if step:  # the first step warms up kernels and autotuning
            times.append(time.perf_counter() - t0)
    tokens = sum(len(x) for x in ids)
    with torch.no_grad():
        diff = (fn(model, ids).float() - truth).abs().max().item() / truth.abs().mean().item()
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else float("nan")
    tps = tokens * len(times) / sum(times)
    print(f"{name:18s} {tps:12,.0f} tok/s  peak {peak:6.2f} GiB  max |diff| / mean |h| vs alone: {diff:.2e}")
    return tps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--tiny", action="store_true", help="the tiny-qwen3.5 shape (CPU smoke)")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--min-doc", type=int, default=256)
    p.add_argument("--max-doc", type=int, default=4096)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--torch-path", action="store_true", help="also time prl's torch path where fla runs")
    args = p.parse_args()
    from prl_trainer_torch import hybrid

    model = build(args)
    assert hybrid.install(model)
    lengths = documents(args)
    gen = torch.Generator().manual_seed(1)
    ids = [torch.randint(0, model.config.vocab_size, (n,), generator=gen) for n in lengths]
    fla = hybrid._fla_kernels() is not None and args.device == "cuda" and args.dtype != "float32"
    print(
        f"device {torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'}, {args.dtype}, "
        f"{model.config.num_hidden_layers} layers of width {model.config.hidden_size} "
        f"({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters), {len(ids)} documents, "
        f"{sum(lengths)} tokens (longest {max(lengths)}), fla kernels: {'yes' if fla else 'no'}"
    )
    with torch.no_grad():  # one document at a time: stock layers, fla's kernels when installed
        truth = run_alone(model, ids).float()
    results = {"prl-packed": timed("prl-packed", run_packed, model, ids, args, truth)}
    if not fla or args.torch_path:  # torch's reference delta rule is slow on a GPU: on request
        with fla_off():
            results["prl-packed-torch"] = timed("prl-packed-torch", run_packed, model, ids, args, truth)
    results["hf-padded"] = timed("hf-padded", run_padded, model, ids, args, truth)
    base = results["hf-padded"]
    print("ratios vs hf-padded: " + ", ".join(f"{k} {v / base:.2f}x" for k, v in results.items()))


if __name__ == "__main__":
    main()
