"""Helpers for distillation tests: a teacher that differs from the student in a learnable
way, the exact reverse KL between two checkpoints, a run's per-step metrics, and the
supervised warm start (:func:`fit_rows`) that learning tests start their runs from.

torch and transformers are imported inside the functions: ``prl.testing`` ships with the
torch-free core.
"""

from __future__ import annotations

import json
from pathlib import Path


def sharpened_model(base: Path, out: Path, scale: float = 8.0) -> Path:
    """A copy of the model at ``base`` (a tiny model, say) written to ``out`` with its final
    norm scaled by ``scale``: every next-token distribution becomes the base model's at
    temperature 1/scale. With the student as ``base`` this is a teacher the student can
    reach (one direction of weight space), so distilling towards it shows a clear drop in
    KL within a few steps."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    shutil.copytree(base, out, dirs_exist_ok=True)  # tokenizer and generation config come along
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with torch.no_grad():
        model.model.norm.weight.mul_(scale)
    model.save_pretrained(out)
    return Path(out)


def reverse_kl(student: Path, teacher: Path, contexts: list[list[int]], weights: Path | None = None) -> float:
    """Mean over every position of ``contexts`` of the exact KL(student ‖ teacher) between
    next-token distributions; ``weights`` (a safetensors file, e.g. a run's broadcast of
    step N) replace the student's."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    def load(path: Path, state: Path | None = None):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        if state is not None:
            model.load_state_dict(load_file(str(state)), strict=False)
        return model.eval()

    p_model, q_model = load(student, weights), load(teacher)
    total = 0.0
    with torch.no_grad():
        for ids in contexts:
            x = torch.tensor([ids])
            lp = torch.log_softmax(p_model(x).logits.float(), -1)
            lq = torch.log_softmax(q_model(x).logits.float(), -1)
            total += float((lp.exp() * (lp - lq)).sum(-1).mean())
    return total / len(contexts)


def trainer_metrics(run_dir: Path, key: str) -> dict[int, float]:
    """``{step: value}`` of a trainer metric from the run's file monitor."""
    path = Path(run_dir) / "monitors" / "file" / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["step"]: float(r[key]) for r in rows if r.get("producer") == "trainer" and key in r}


def next_token_kl(model: Path, pairs: list[tuple[list[int], list[int]]], weights: Path | None = None) -> float:
    """Mean over ``pairs`` of the exact KL(π(· | a) ‖ π(· | b)) between one model's
    next-token distributions after context ``a`` and after context ``b`` (opsd: the plain
    prompt and the prompt with a demonstration); ``weights`` replace the model's."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    if weights is not None:
        net.load_state_dict(load_file(str(weights)), strict=False)
    net.eval()
    total = 0.0
    with torch.no_grad():
        for a, b in pairs:
            lp = torch.log_softmax(net(torch.tensor([a])).logits[0, -1].float(), -1)
            lq = torch.log_softmax(net(torch.tensor([b])).logits[0, -1].float(), -1)
            total += float((lp.exp() * (lp - lq)).sum())
    return total / len(pairs)


def fit_rows(model_dir: Path, rows: list[tuple[list[int], list[int]]], steps: int, lr: float, batch: int = 4) -> None:
    """Fit the model in ``model_dir`` to ``rows`` of (token ids, labels; -100 is unscored) and
    save it: a warm start that gives a learning test a policy with something to learn from.
    Seeded, one thread, so one machine repeats it exactly."""
    import random

    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same reduction order on every machine size
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        model.train()
        optim = torch.optim.AdamW(model.parameters(), lr=lr)
        rng = random.Random(0)
        for _ in range(steps):
            chosen = rng.sample(rows, batch)
            width = max(len(ids) for ids, _ in chosen)
            ids = torch.tensor([x + [0] * (width - len(x)) for x, _ in chosen])
            labels = torch.tensor([y + [-100] * (width - len(y)) for _, y in chosen])
            model(input_ids=ids, labels=labels).loss.backward()
            optim.step()
            optim.zero_grad()
        model.save_pretrained(model_dir)
    finally:  # a test process goes on to other tests: leave its thread count as it was
        torch.set_num_threads(threads)
