"""debug: a constant advantage on every sampled token, whatever the reward
(``docs/algorithms.md``).

    A = advantage   (default 1.0; 0 is refused: it would train nothing)

With A = 1 the rl loss is plain likelihood maximisation of the policy's own samples, which
sharpens the policy towards what it already does. That makes it a plumbing check: a run
that trains, broadcasts and resamples correctly shows falling entropy and, on tasks the
policy partly solves already, its usual answers growing more frequent, with no reward
signal involved. Prompt and env tokens get advantage 0 and weight 0.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import field_validator

from prl.advantages import assign
from prl.contracts.algorithm import Algorithm, AlgorithmConfig
from prl.types import Trace


class Debug(Algorithm):
    """The same advantage on every sampled token; the rl loss component."""

    type: ClassVar[str] = "debug"

    class Config(AlgorithmConfig):
        """``[orchestrator.train.algo] type = "debug"``."""

        type: Literal["debug"] = "debug"
        """Selects this algorithm."""
        advantage: float = 1.0
        """The advantage given to every sampled token; must not be 0."""

        @field_validator("advantage")
        @classmethod
        def _nonzero(cls, value: float) -> float:
            if value == 0.0:
                raise ValueError("must be nonzero (an advantage of 0 trains nothing)")
            return value

    config: Config

    def score_group(self, group: list[Trace]) -> None:
        for trace in group:
            assign(trace, self.config.advantage)
