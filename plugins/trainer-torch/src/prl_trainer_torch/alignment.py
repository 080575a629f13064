"""Score completions an inference server sampled with the trainer's own log-prob path.

On an exactly on-policy batch (same checkpoint, no update in between) every sampled token
must get the same log-prob from the trainer as from the engine that sampled it; a gap shows
up to users as ``mismatch_kl`` and importance ratios far from 1 on every step. The tests of
both inference backends use this to check that alignment, and it doubles as a diagnostic
for a new backend or model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from prl.orchestrator.packing import pack
from prl.types import TrainingSample
from prl_trainer_torch.rl_step import MicroBatch, to_micro_batch, token_logprobs


@dataclass
class Sampled:
    """One completion as an inference server returned it."""

    prompt: list[int]
    completion: list[int]
    logprobs: list[float]
    temperature: float
    env: str = "env"


def training_sample(s: Sampled) -> TrainingSample:
    """The sample the orchestrator would ship for ``s``, every sampled token trained."""
    n = len(s.prompt) + len(s.completion)
    mask = [False] * len(s.prompt) + [True] * len(s.completion)
    return TrainingSample(
        input_ids=list(s.prompt) + list(s.completion),
        loss_mask=mask,
        advantages=[1.0 if x else 0.0 for x in mask],
        inference_logprobs=[0.0] * len(s.prompt) + list(s.logprobs),
        temperature=s.temperature,
        rl_weights=[1.0 if x else 0.0 for x in mask],
        ce_weights=[0.0] * n,
        ref_kl_weights=[0.0] * n,
        env_name=s.env,
    )


def packed_batch(sampled: list[Sampled], seq_len: int) -> MicroBatch:
    """All completions packed into one micro-batch by the orchestrator's packer."""
    ((raw,),) = pack([training_sample(s) for s in sampled], seq_len=seq_len, ranks=1)
    return to_micro_batch(raw, torch.device("cpu"))


def logprob_gaps(model: torch.nn.Module, batch: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(trainer, inference) log-probs of the batch's trained tokens, in packed order."""
    with torch.no_grad():
        logp, _ = token_logprobs(model, batch)
    mask = batch.loss_mask
    return logp[mask], batch.inference_logprobs[mask]
