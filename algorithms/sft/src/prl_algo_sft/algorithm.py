"""sft: hard distillation from a frozen model (``docs/distillation.md``).

The rollouts of a source with this algorithm are sampled by a frozen model, not by the
policy: ``sampling_source()`` returns ``[orchestrator.train.algo.sampling.source]``, and
the orchestrator runs the source's episodes against that server (any OpenAI-compatible
server that takes a token-id prompt on ``/v1/completions`` and returns the completion's
token ids, e.g. vLLM or ``prl inference``). The env still renders prompts, plays the
episode and scores it; the reward is logged but not trained on.

Every token the frozen model produced feeds the trainer's ce component with weight 1,

    loss_t = −log π(y_t | y_<t)

normalised by the step's ce token count (``docs/algorithms.md``, fixed components): supervised learning on
the frozen model's answers, collected online from the run's own tasks. Prompt and
env-observation tokens get weight 0; advantages and rl/ref_kl weights are 0 everywhere.
The trainer logs ``loss/ce`` and ``nll`` (mean negative log-likelihood per token).

The frozen model must share the student's tokenizer (its token ids are trained on as they
are). A sampler that is down, serves another model name or returns no token ids stops the
run at start-up with one line naming ``orchestrator.train.algo.sampling.source``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from prl.config.base import PrlModel
from prl.contracts.algorithm import Algorithm, AlgorithmConfig
from prl.frozen import FrozenModelConfig, check_completions
from prl.types import Trace

SOURCE_FIELD = "orchestrator.train.algo.sampling.source"


def imitate(trace: Trace) -> None:
    """Sampled tokens get ce weight 1; everything else 0 (and advantage 0)."""
    for branch in trace.branches:
        mask = branch.sampled_mask
        n = len(mask)
        branch.advantages = [0.0] * n
        branch.rl_weights = [0.0] * n
        branch.ref_kl_weights = [0.0] * n
        branch.ce_weights = [1.0 if s else 0.0 for s in mask]


class SFTSampling(PrlModel):
    """``[orchestrator.train.algo.sampling]``: where the trained tokens come from."""

    source: FrozenModelConfig
    """The frozen model's server (``name``, ``base_url``), started by the user."""


class SFT(Algorithm):
    """Cross-entropy on tokens sampled by a frozen model; the ce loss component."""

    type: ClassVar[str] = "sft"

    class Config(AlgorithmConfig):
        """``[orchestrator.train.algo] type = "sft"`` with ``[orchestrator.train.algo.sampling.source]``."""

        type: Literal["sft"] = "sft"
        """Selects this algorithm."""
        sampling: SFTSampling
        """Sampling from a frozen model (required: ``sampling.source``)."""

    config: Config

    def sampling_source(self) -> dict:
        return self.config.sampling.source.model_dump()

    def score_group(self, group: list[Trace]) -> None:
        for trace in group:
            imitate(trace)

    async def start(self) -> None:
        await check_completions(SOURCE_FIELD, self.config.sampling.source)
