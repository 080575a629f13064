"""Algorithm contract: advantages and loss-component weights for a group of traces."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from prl.config.base import PluginConfigBase
from prl.contracts.base import Plugin
from prl.types import Trace

if TYPE_CHECKING:
    from prl.contracts.inference import InferenceClient
    from prl.contracts.renderer import Renderer


class AlgorithmConfig(PluginConfigBase):
    """Base of ``[orchestrator.train.algo]`` variants."""

    def build(self) -> Algorithm:
        """The algorithm this config selects."""
        return super().build()


class Algorithm(Plugin, ABC):
    """Turns a scored group into per-token advantages and rl/ce/ref_kl weights.

    ``sampling_source`` is ``"policy"`` unless the algorithm samples from a frozen model
    (then a ``{name, base_url}`` dict). Algorithms using rl or ref_kl must sample from the
    policy.
    """

    type: ClassVar[str]
    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig

    def __init__(self, config: AlgorithmConfig) -> None:
        self.config = config

    def sampling_source(self) -> str | dict:
        """``"policy"``, or ``{"name", "base_url", ...}`` of the frozen model whose samples
        this algorithm trains on; the orchestrator then runs the source's rollouts against
        that server (its other fields are those of :class:`prl.frozen.FrozenModelConfig`)."""
        return "policy"

    async def start(self) -> None:
        """Check the frozen models this algorithm reads, once, before the first dispatch.

        Raise :class:`prl.frozen.FrozenModelError` (one line naming the config field and the
        URL) when one is down or lacks a capability, so the run stops at start-up instead of
        waiting on it. The default checks nothing.
        """

    async def ref_logprobs(self, group: list[Trace], task: Any, policy: InferenceClient, renderer: Renderer) -> None:
        """Fill ``ref_logprobs`` on the branches of ``group`` whose tokens feed ref_kl.

        Runs after :meth:`score_group`, with the group's ``task``, the policy's inference
        client and the run's renderer (opd prefill-scores on its teacher, opsd on the live
        policy with a demonstration prepended). Entries of tokens with ref_kl weight 0 are
        ignored by the loss. The default does nothing.
        """

    async def close(self) -> None:
        """Release what :meth:`start` or :meth:`ref_logprobs` opened (HTTP clients)."""

    @abstractmethod
    def score_group(self, group: list[Trace]) -> None:
        """Fill ``advantages`` and ``{rl,ce,ref_kl}_weights`` on every branch of ``group``.

        Called once per finished group (the episodes of one task), with the traces that
        finished without error and hold branches; each list has one float per token. A
        weight left None is 1 on sampled tokens for rl, 0 for ce and ref_kl. Non-sampled
        tokens (prompt, env observations) get weight 0 unless the algorithm trains on them
        on purpose. An exception ends the run.
        """
