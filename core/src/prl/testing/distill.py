"""Helpers for distillation tests: a teacher that differs from the student in a learnable
way, the exact reverse KL between two checkpoints, and a run's per-step metrics.

torch and transformers are imported inside the functions: ``prl.testing`` ships with the
torch-free core.
"""

from __future__ import annotations

import json
from pathlib import Path


def sharpened_model(out: Path, seed: int = 0, scale: float = 8.0) -> Path:
    """A tiny model (``prl model init`` preset tiny, ``seed``) whose final norm is scaled by
    ``scale``: every next-token distribution becomes the base model's at temperature
    1/scale. With the student's seed this is a teacher the student can reach (one direction
    of weight space), so distilling towards it shows a clear drop in KL within a few steps."""
    import torch
    from prl_model_init import make_model
    from transformers import AutoModelForCausalLM

    path = make_model(out, preset="tiny", seed=seed, force=True)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():
        model.model.norm.weight.mul_(scale)
    model.save_pretrained(path)
    return path


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
