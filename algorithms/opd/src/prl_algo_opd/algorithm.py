"""opd: on-policy distillation, reverse KL to a frozen teacher (``docs/distillation.md``).

The policy π samples as in RL; a frozen teacher π_T, served separately by the user, scores
what it sampled. No reward and no advantage: every sampled token t of a trace feeds the
trainer's ref_kl component with weight 1,

    loss_t = −sg(log π_T(y_t | y_<t) − log π(y_t | y_<t)) · r̂_t

(r̂ the capped importance ratio; tokens with p − q < −0.2 are masked, see
``docs/algorithms.md``, fixed components). Its gradient is the per-token reverse KL(π ‖ π_T) gradient
estimated on the policy's own samples, so the student is pulled towards the teacher exactly
where it goes. The trainer logs the estimate ``ref_kl`` = mean_t (log π − log π_T).

The teacher's ``log π_T`` of every token comes from prefill scoring: the generate route with
``max_tokens 1`` and ``prompt_logprobs`` over the whole branch (prompt + completion), which
both prl inference backends (torch, vLLM) serve. The teacher must share the student's
tokenizer, since it scores the student's token ids. A teacher that is down, or one whose
server cannot prefill-score, stops the run at start-up with one line naming
``orchestrator.train.algo.teacher`` and its URL.

Prompt and env-observation tokens get weight 0 in every component (the student is not
trained to produce them), so the reward plays no part in the update; it is still logged.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, Literal

from prl.client import InferenceError, InferenceHTTPClient
from prl.contracts.algorithm import Algorithm, AlgorithmConfig
from prl.frozen import FrozenModelConfig, check_scoring
from prl.types import Branch, Trace

TEACHER_FIELD = "orchestrator.train.algo.teacher"


def distill(trace: Trace) -> None:
    """Sampled tokens get ref_kl weight 1; every token advantage 0 and rl/ce weight 0."""
    for branch in trace.branches:
        mask = branch.sampled_mask
        n = len(mask)
        branch.advantages = [0.0] * n
        branch.rl_weights = [0.0] * n
        branch.ce_weights = [0.0] * n
        branch.ref_kl_weights = [1.0 if s else 0.0 for s in mask]


def scored_logprobs(scores: list[float | None]) -> list[float]:
    """Prefill scores as a token-aligned ``ref_logprobs`` list (the first token has no
    logprob; it is never sampled, so its 0.0 is never read)."""
    return [0.0 if s is None else float(s) for s in scores]


def distilled(group: list[Trace]) -> list[Branch]:
    """Branches of ``group`` with at least one token feeding ref_kl."""
    return [b for t in group for b in t.branches if b.ref_kl_weights and any(b.ref_kl_weights)]


class OPD(Algorithm):
    """Reverse KL to a frozen teacher on the policy's own samples; the ref_kl component."""

    type: ClassVar[str] = "opd"

    class Config(AlgorithmConfig):
        """``[orchestrator.train.algo] type = "opd"`` with ``[orchestrator.train.algo.teacher]``."""

        type: Literal["opd"] = "opd"
        """Selects this algorithm."""
        teacher: FrozenModelConfig
        """The frozen teacher's server (``name``, ``base_url``): a prl inference server
        (torch or vllm backend) started by the user on a model with the student's tokenizer."""

    config: Config

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self._client: InferenceHTTPClient | None = None

    def score_group(self, group: list[Trace]) -> None:
        for trace in group:
            distill(trace)

    async def start(self) -> None:
        await check_scoring(TEACHER_FIELD, self.config.teacher)

    async def ref_logprobs(self, group: list[Trace], task: Any, policy: Any, renderer: Any) -> None:
        if self._client is None:
            self._client = self.config.teacher.client()
        branches = distilled(group)
        try:
            scores = await asyncio.gather(*(self._client.score(b.token_ids) for b in branches))
        except InferenceError as exc:
            raise RuntimeError(
                f"{TEACHER_FIELD}: prefill scoring at {self.config.teacher.base_url} failed mid-run: {exc}"
            ) from None
        for branch, score in zip(branches, scores, strict=True):
            branch.ref_logprobs = scored_logprobs(score)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
