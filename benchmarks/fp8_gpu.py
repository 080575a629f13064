"""FP8 export check: prl's conversions timed, and greedy generations of the FP8 model
against the bf16 one.

Steps, on the model directory given by ``--model``:

1. ``prl convert to-fp8`` (bf16 -> FP8), ``prl convert to-bf16`` (FP8 -> bf16) and, with
   ``--checkpoint step_N``, ``prl export --dtype fp8`` (DCP -> FP8, ``--num-workers`` ranks);
   each timed, with the size of what it wrote;
2. the source loaded in bf16 with transformers (the reference), the FP8 directory loaded
   with transformers' fine-grained FP8 support (``from_pretrained(fp8_dir, device_map=...)``),
   and the FP8 -> bf16 round trip loaded in bf16;
3. greedy tokens for fixed prompts from each. Two agreement rates against the reference:
   ``prefix``: generated tokens before the first difference / all generated tokens;
   ``top1``: the reference's sequence fed to the other model (teacher forcing), the
   fraction of positions where both pick the same next token; one early divergence does not
   drag this down.

On a GPU (the target: H200, torch 2.11, transformers 5.17)::

    prl model init --preset qwen3-0.6b --out /tmp/qwen3-0.6b
    python benchmarks/fp8_gpu.py --model /tmp/qwen3-0.6b --device cuda

Smoke test on a CPU: transformers loads an FP8 directory on a CPU only by dequantizing it
(and only with accelerate installed); the FP8 load is then reported as skipped or as
dequantized, and the rest runs::

    prl model init --preset tiny --out /tmp/tiny
    python benchmarks/fp8_gpu.py --model /tmp/tiny --device cpu --max-new-tokens 8
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Write a haiku about the sea:",
    "1, 2, 3, 4, 5,",
    "Once upon a time, in a small village,",
    "The mitochondria is",
    "Translate to German: good morning",
    "SELECT name FROM users WHERE",
]


def timed(label: str, fn, *args, **kwargs):
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    seconds = time.perf_counter() - t0
    print(f"{label}: {seconds:.2f} s", flush=True)
    return result, seconds


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).glob("*.safetensors"))


def convert(model: Path, work: Path, checkpoint: Path | None, num_workers: int) -> dict:
    from prl_trainer_torch.export import export_checkpoint
    from prl_trainer_torch.fp8_convert import bf16_to_fp8, fp8_to_bf16

    report: dict = {"source_bytes": dir_bytes(model)}
    _, report["bf16_to_fp8_s"] = timed("bf16 -> FP8 (prl convert to-fp8)", bf16_to_fp8, model, work / "fp8")
    report["fp8_bytes"] = dir_bytes(work / "fp8")
    _, report["fp8_to_bf16_s"] = timed("FP8 -> bf16 (prl convert to-bf16)", fp8_to_bf16, work / "fp8", work / "bf16")
    if checkpoint is not None:
        _, report["dcp_to_fp8_s"] = timed(
            f"DCP -> FP8 (prl export --dtype fp8 --num-workers {num_workers})",
            export_checkpoint,
            checkpoint,
            work / "dcp-fp8",
            "fp8",
            num_workers,
        )
    return report


def load(path: Path, device: str, fp8: bool | str):
    """A model for generation. The FP8 directory goes through transformers' fine-grained FP8
    loading (``device_map``, which needs accelerate), with the dtypes its config gives;
    ``fp8="dequantize"`` has transformers read the FP8 weights and their scales and
    dequantize them to bf16 (its path where no FP8 kernel can be had); the bf16 ones load
    plainly and move to the device."""
    from transformers import AutoModelForCausalLM

    if fp8 == "dequantize":
        from transformers import FineGrainedFP8Config

        config = FineGrainedFP8Config(dequantize=True)
        return AutoModelForCausalLM.from_pretrained(path, quantization_config=config, dtype=torch.bfloat16).to(device)
    if fp8:
        return AutoModelForCausalLM.from_pretrained(path, device_map=device).eval()
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(device).eval()


@torch.no_grad()
def max_logit_diff(a, b, tokenizer, ref: list[list[int]]) -> float:
    """Largest |logit| difference of two models along the reference's greedy sequences."""
    worst = 0.0
    for prompt, gen in zip(PROMPTS, ref, strict=True):
        ids = torch.tensor([tokenizer(prompt).input_ids + gen])
        la, lb = a(ids.to(a.device)).logits.float().cpu(), b(ids.to(b.device)).logits.float().cpu()
        worst = max(worst, float((la - lb).abs().max()))
    return worst


def fp8_weight_count(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.dtype == torch.float8_e4m3fn)


@torch.no_grad()
def generate(model, tokenizer, max_new_tokens: int) -> list[list[int]]:
    """Greedy continuations of exactly ``max_new_tokens`` (EOS does not stop them, so every
    prompt contributes the same number of tokens)."""
    outs = []
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt").input_ids.to(model.device)
        out = model.generate(
            ids,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id or 0,
        )
        outs.append(out[0, ids.shape[1] :].tolist())
    return outs


def prefix_agreement(ref: list[list[int]], other: list[list[int]]) -> float:
    same = total = 0
    for a, b in zip(ref, other, strict=True):
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        same, total = same + n, total + len(a)
    return same / max(total, 1)


@torch.no_grad()
def top1_agreement(ref_model, model, tokenizer, ref: list[list[int]]) -> float:
    """Next-token argmax of both models along the reference's own greedy sequences."""
    same = total = 0
    for prompt, gen in zip(PROMPTS, ref, strict=True):
        prompt_ids = tokenizer(prompt).input_ids
        ids = torch.tensor([prompt_ids + gen])
        a = ref_model(ids.to(ref_model.device)).logits[0, len(prompt_ids) - 1 : -1].argmax(-1).cpu()
        b = model(ids.to(model.device)).logits[0, len(prompt_ids) - 1 : -1].argmax(-1).cpu()
        same, total = same + int((a == b).sum()), total + a.numel()
    return same / max(total, 1)


def _why(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def score(name: str, other, reference, tokenizer, ref: list[list[int]], max_new_tokens: int) -> dict:
    """Agreement of ``other`` with the reference; a failing forward (an FP8 kernel missing on
    this machine, say) is reported, not raised, so the timings still print."""
    try:
        out = {
            f"{name}_prefix_agreement": prefix_agreement(ref, generate(other, tokenizer, max_new_tokens)),
            f"{name}_top1_agreement": top1_agreement(reference, other, tokenizer, ref),
        }
    except Exception as exc:
        print(f"{name}: generation failed ({_why(exc)})", flush=True)
        return {f"{name}_failed": _why(exc)}
    print(
        f"{name}: greedy prefix agreement {out[f'{name}_prefix_agreement']:.3f}, "
        f"teacher-forced top-1 agreement {out[f'{name}_top1_agreement']:.3f}",
        flush=True,
    )
    return out


def compare(model: Path, work: Path, device: str, max_new_tokens: int) -> dict:
    from transformers import AutoTokenizer

    cuda = device.startswith("cuda")
    tokenizer = AutoTokenizer.from_pretrained(model)
    reference, _ = timed("load bf16 reference", load, model, device, False)
    ref = generate(reference, tokenizer, max_new_tokens)
    report: dict = {}
    ref_gib = torch.cuda.memory_allocated() / 2**30 if cuda else 0.0
    if cuda:
        report["bf16_gpu_gib"] = round(ref_gib, 3)
    candidates = {
        "fp8": (work / "fp8", True),
        "fp8_to_bf16": (work / "bf16", False),
        "fp8_dequantized_by_transformers": (work / "fp8", "dequantize"),
    }
    kept: dict = {}
    for name, (path, is_fp8) in candidates.items():
        try:
            other, report[f"{name}_load_s"] = timed(f"load {name}", load, path, device, is_fp8)
        except Exception as exc:  # transformers refuses FP8 on some machines; say why, go on
            report[f"{name}_skipped"] = _why(exc)
            print(f"{name}: not loaded ({_why(exc)})", flush=True)
            continue
        if cuda:  # what this model holds on the GPU, beyond the reference
            report[f"{name}_gpu_gib"] = round(torch.cuda.memory_allocated() / 2**30 - ref_gib, 3)
        if is_fp8 is True:  # the kernel path; "dequantize" holds bf16 by design
            report["fp8_weights_in_memory"] = fp8_weight_count(other)
            if report["fp8_weights_in_memory"] == 0:
                print("fp8: transformers dequantized the weights (no FP8 kernels on this device)", flush=True)
        report.update(score(name, other, reference, tokenizer, ref, max_new_tokens))
        if name == "fp8_to_bf16":
            kept[name] = other  # compared below with transformers' reading of the FP8 directory
        elif name == "fp8_dequantized_by_transformers" and "fp8_to_bf16" in kept:
            diff = max_logit_diff(kept["fp8_to_bf16"], other, tokenizer, ref)
            report["transformers_vs_prl_dequantized_max_logit_diff"] = diff
            print(f"transformers' dequantization vs prl convert to-bf16: max |logit diff| {diff:.3g}", flush=True)
        del other
        if cuda:
            torch.cuda.empty_cache()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="bf16 (or float32) model directory")
    parser.add_argument("--checkpoint", type=Path, help="a checkpoints/step_N directory, to time DCP -> FP8 too")
    parser.add_argument("--num-workers", type=int, default=1, help="torchrun ranks for DCP -> FP8")
    parser.add_argument("--device", default="cuda", help="cuda or cpu")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--work", type=Path, help="where the converted directories go (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device; use --device cpu for a smoke test")
    work = args.work or Path(tempfile.mkdtemp(prefix="prl-fp8-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    report = {"model": str(args.model), "device": args.device, "prompts": len(PROMPTS)}
    report["max_new_tokens"] = args.max_new_tokens
    report.update(convert(args.model, work, args.checkpoint, args.num_workers))
    print(f"safetensors bytes: source {report['source_bytes']:,}, FP8 {report['fp8_bytes']:,}", flush=True)
    report.update(compare(args.model, work, args.device, args.max_new_tokens))
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
