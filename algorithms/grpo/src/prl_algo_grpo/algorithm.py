"""GRPO: group-relative advantages, the default algorithm (``docs/algorithms.md``).

For a group of traces of one task with rewards r_i:

    A_i = r_i − b,   b = mean_i r_i

(no division by the std: every group's advantages stay in reward units.) Options:

``length_penalty``: before the baseline, each reward is shaped linearly,
    r_i ← r_i − p̄ · (0.25 · out_i / max out + 0.1 · in_i / max in + 0.1 · turns_i / max turns)
    where p̄ is the group's mean (unshaped) reward, out_i the sampled tokens, in_i the
    context tokens and turns_i the turns of trace i, each maximum taken over the group (a
    maximum of 0 contributes 0). Since p̄ scales it, groups the model already solves get the
    strongest push towards short answers and never-solved groups get none.

``length_weighted_baseline``: b = Σ L_i · r_i / Σ L_i, with L_i the trace's trainable
    (sampled) token count, so the advantage is zero-mean per token rather than per trace.

``loss_aggregation``:
    ``token`` (default): every sampled token has rl weight 1; with the trainer's
    normalisation by the sum of rl weights, the rl loss is a mean over all tokens of the
    step, so long answers weigh more.
    ``prompt``: every sampled token has rl weight 1/T_q, T_q the group's trainable token
    count; a group's weights then sum to 1 and the rl loss becomes a mean over prompts.

Every sampled token of trace i gets advantage A_i; prompt and env-observation tokens get
advantage 0 and weight 0. All traces handed in take part (the orchestrator decides which
traces make up a group).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from prl.advantages import assign, context_tokens, sampled_tokens
from prl.contracts.algorithm import Algorithm, AlgorithmConfig
from prl.types import Trace

OUTPUT_WEIGHT = 0.25
INPUT_WEIGHT = 0.1
TURNS_WEIGHT = 0.1


class GRPO(Algorithm):
    """Reward minus the group baseline on every sampled token; the rl loss component."""

    type: ClassVar[str] = "grpo"
    is_default: ClassVar[bool] = True

    class Config(AlgorithmConfig):
        """``[orchestrator.train.algo] type = "grpo"``."""

        type: Literal["grpo"] = "grpo"
        """Selects this algorithm."""
        length_weighted_baseline: bool = False
        """Baseline Σ L·r / Σ L over trainable tokens instead of the plain mean."""
        length_penalty: bool = False
        """Shape rewards by output tokens, input tokens and turns, scaled by the mean reward."""
        loss_aggregation: Literal["token", "prompt"] = "token"
        """token: rl weight 1 per token; prompt: 1/T_q, a mean over prompts."""

    config: Config

    def score_group(self, group: list[Trace]) -> None:
        if not group:
            return
        rewards = [float(t.reward) for t in group]
        if self.config.length_penalty:
            rewards = length_penalised(group, rewards)
        advantages = self.advantages(group, rewards)
        rl_weight = 1.0
        if self.config.loss_aggregation == "prompt":
            group_tokens = sum(sampled_tokens(t) for t in group)
            rl_weight = 1.0 / group_tokens if group_tokens else 0.0
        for trace, advantage in zip(group, advantages, strict=True):
            assign(trace, advantage, rl_weight)

    def advantages(self, group: list[Trace], rewards: list[float]) -> list[float]:
        """Reward minus the (optionally length-weighted) group baseline."""
        baseline = sum(rewards) / len(rewards)
        if self.config.length_weighted_baseline:
            lengths = [sampled_tokens(t) for t in group]
            total = sum(lengths)
            if total:
                baseline = sum(n * r for n, r in zip(lengths, rewards, strict=True)) / total
        return [r - baseline for r in rewards]


def length_penalised(group: list[Trace], rewards: list[float]) -> list[float]:
    """Rewards minus the linear length penalty of the module docstring."""
    mean_reward = sum(rewards) / len(rewards)
    outs = [sampled_tokens(t) for t in group]
    ins = [context_tokens(t) for t in group]
    turns = [t.turns for t in group]

    def frac(values: list[int], i: int) -> float:
        top = max(values)
        return values[i] / top if top > 0 else 0.0

    return [
        r - mean_reward * (OUTPUT_WEIGHT * frac(outs, i) + INPUT_WEIGHT * frac(ins, i) + TURNS_WEIGHT * frac(turns, i))
        for i, r in enumerate(rewards)
    ]
