"""Reverse-text SFT data and its held-out reward.

Each example is a random lowercase string s of 3 to 8 letters (a few with one space);
the prompt asks to reverse it and the completion is ``s[::-1]``. Train and held-out
splits are drawn from disjoint seeds and overlapping strings are removed from the
held-out split, so the held-out reward measures generalisation, not recall.

Reward of a generation g for the target t: ``difflib.SequenceMatcher(None, g, t).ratio()``
= 2 M / (|g| + |t|) with M the matched characters (1.0 for an exact reversal). The policy
decodes greedily with transformers ``generate``; prompts go through the renderer.
"""

from __future__ import annotations

import json
import random
import string
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

PROMPT = "Reverse the text: {}"


def _word(rng: random.Random, low: int, high: int) -> str:
    n = rng.randint(low, high)
    chars = [rng.choice(string.ascii_lowercase) for _ in range(n)]
    if n >= 6 and rng.random() < 0.25:
        chars[rng.randint(1, n - 2)] = " "
    return "".join(chars)


def make_rows(n: int, seed: int, low: int = 3, high: int = 8) -> list[dict[str, str]]:
    rng = random.Random(seed)
    return [{"prompt": PROMPT.format(s), "completion": s[::-1]} for s in (_word(rng, low, high) for _ in range(n))]


def write_dataset(out: Path, n_train: int = 20000, n_val: int = 200, seed: int = 0) -> tuple[Path, Path]:
    """Write ``train.jsonl`` and ``val.jsonl`` (held out) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    train = make_rows(n_train, seed)
    seen = {r["prompt"] for r in train}
    val = [r for r in make_rows(n_val * 2, seed + 1_000_003) if r["prompt"] not in seen][:n_val]
    paths = (out / "train.jsonl", out / "val.jsonl")
    for path, rows in zip(paths, (train, val), strict=False):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths


def lcs_ratio(generated: str, target: str) -> float:
    return SequenceMatcher(None, generated, target).ratio()


def evaluate(model_dir: str, val_path: Path, renderer_cfg: Any, limit: int = 200, batch: int = 50) -> dict[str, float]:
    """Mean LCS ratio and exact-match rate of greedy generations on the held-out rows."""
    import torch
    from transformers import AutoModelForCausalLM

    renderer = renderer_cfg.build(tokenizer=str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    rows = [json.loads(line) for line in Path(val_path).read_text().splitlines()][:limit]
    stops = renderer.get_stop_token_ids()
    scores, exact = [], 0
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        prompts = [
            renderer.render_ids([{"role": "user", "content": r["prompt"]}], add_generation_prompt=True) for r in chunk
        ]
        width = max(map(len, prompts))
        # Left padding keeps every prompt's last token at the same column for generate.
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
        attn = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=attn,
                max_new_tokens=max(len(r["completion"]) for r in chunk) * 2 + 8,
                do_sample=False,
                eos_token_id=stops,
                pad_token_id=stops[0] if stops else 0,
            )
        for r, seq in zip(chunk, out[:, width:].tolist(), strict=False):
            cut = next((i + 1 for i, t in enumerate(seq) if t in stops), len(seq))
            text = (renderer.parse_response(seq[:cut]).get("content") or "").strip()
            scores.append(lcs_ratio(text, r["completion"]))
            exact += text == r["completion"]
    return {"reward/lcs_ratio": sum(scores) / len(scores), "reward/exact": exact / len(scores), "n": float(len(scores))}


def main(argv: list[str] | None = None) -> int:
    """``python -m prl_trainer_torch.reverse_text MODEL_DIR VAL_JSONL [RENDERER]``: print the reward."""
    import sys

    from prl.plugins import get_registry

    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print("usage: python -m prl_trainer_torch.reverse_text MODEL_DIR VAL_JSONL [RENDERER]", file=sys.stderr)
        return 2
    renderer_cfg = get_registry().get("renderers", args[2] if len(args) == 3 else "auto").Config()
    print(json.dumps(evaluate(args[0], Path(args[1]), renderer_cfg)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
