"""max_rl: advantages relative to the group's mean reward (``docs/algorithms.md``).

    A_i = (r_i − r̄) / r̄,   r̄ = mean_i r_i;   A_i = 0 for every trace when r̄ ≤ 0

Dividing by the mean reward (for 0/1 rewards, the pass rate) scales a group's update by
1/pass-rate: a task solved once in eight pushes its lone success with advantage 7, one
solved seven times in eight with 1/7. This is the gradient of log(pass rate) rather than of
the pass rate itself, i.e. maximum-likelihood on success. Groups with r̄ ≤ 0 carry no signal.

Every sampled token of trace i gets A_i with rl weight 1; other tokens get 0.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from prl.advantages import assign
from prl.contracts.algorithm import Algorithm, AlgorithmConfig
from prl.types import Trace


class MaxRL(Algorithm):
    """Group advantages normalised by the mean reward; the rl loss component."""

    type: ClassVar[str] = "max_rl"

    class Config(AlgorithmConfig):
        """``[orchestrator.train.algo] type = "max_rl"``."""

        type: Literal["max_rl"] = "max_rl"
        """Selects this algorithm."""

    def score_group(self, group: list[Trace]) -> None:
        if not group:
            return
        mean = sum(float(t.reward) for t in group) / len(group)
        for trace in group:
            assign(trace, (float(trace.reward) - mean) / mean if mean > 0 else 0.0)
