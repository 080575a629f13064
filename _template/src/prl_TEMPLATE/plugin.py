"""prl plugin TEMPLATE: replace this docstring with the maths and behaviour of your component.

The example is an algorithm: every token the policy sampled gets advantage
A = reward − ``baseline`` and rl weight 1; prompt and env tokens get 0 everywhere.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from prl import hookimpl
from prl.contracts.algorithm import Algorithm, AlgorithmConfig
from prl.types import Trace


class TemplateAlgorithm(Algorithm):
    """Reward minus a fixed baseline on every sampled token."""

    type: ClassVar[str] = "TEMPLATE"

    class Config(AlgorithmConfig):
        """``[orchestrator.train.algo] type = "TEMPLATE"``."""

        type: Literal["TEMPLATE"] = "TEMPLATE"
        """Selects this algorithm."""
        baseline: float = 0.0
        """Subtracted from every reward."""

    config: Config

    def score_group(self, group: list[Trace]) -> None:
        for trace in group:
            advantage = trace.reward - self.config.baseline
            for branch in trace.branches:
                mask = branch.sampled_mask
                branch.advantages = [advantage if s else 0.0 for s in mask]
                branch.rl_weights = [1.0 if s else 0.0 for s in mask]
                branch.ce_weights = [0.0] * len(mask)
                branch.ref_kl_weights = [0.0] * len(mask)


@hookimpl
def prl_register_algorithms():
    return [TemplateAlgorithm]
