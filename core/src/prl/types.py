"""Plain data exchanged between orchestrator, env tasksets, algorithms and the trainer.

Torch-free on purpose: the orchestrator process never imports torch. Token-aligned lists
all have the length of ``Branch.token_ids``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sampling:
    """Sampling parameters sent with a generate request."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    max_tokens: int | None = None
    stop: list[str] | None = None
    seed: int | None = None


@dataclass
class Generation:
    """One completion returned by the token-in/token-out route."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length" | "abort"
    version: int = 0
    # Per sampled token, the ids top-k/top-p left to sample from (sampling replay); None
    # when sampling was not truncated.
    sampling_mask: list[list[int]] | None = None
    # Per sampled token, the untruncated sampling logprobs of those ids (same shape).
    sampling_mask_logprobs: list[list[float]] | None = None
    # Routing replay: per sampled token, the experts the sampler's MoE routers chose at the
    # position that predicted it, flattened layer by layer (layers x top_k ids); None when
    # the server did not return them.
    routed_experts: list[list[int]] | None = None
    # The prompt as the server ran it, when that differs from the ids sent: a prompt with
    # images holds one placeholder token per image, which the server widens to the image's
    # patch tokens. None when the prompt ran as sent.
    prompt_token_ids: list[int] | None = None


@dataclass
class Branch:
    """One training sample of a trace: a token sequence and which tokens the policy sampled.

    A multi-turn episode whose renderer is prefix-stable is one branch; a re-render (or a
    second agent) starts a new one.
    """

    token_ids: list[int]
    sampled_mask: list[bool]
    logprobs: list[float]
    roles: list[str] | None = None
    agent: str = "default"
    temperature: float = 1.0
    advantages: list[float] | None = None
    rl_weights: list[float] | None = None
    ce_weights: list[float] | None = None
    ref_kl_weights: list[float] | None = None
    ref_logprobs: list[float] | None = None
    # Sampling replay, aligned with token_ids ([] where a token was not sampled or sampling
    # did not truncate); None when no token of the branch was truncated.
    sampling_mask: list[list[int]] | None = None
    sampling_mask_logprobs: list[list[float]] | None = None
    # Routing replay, aligned with token_ids (see Generation; [] where a token was not
    # sampled); None when no generation of the branch returned routed experts.
    routed_experts: list[list[int]] | None = None
    # The images of a vision-language prompt (data: or http(s):// URLs), in the order of their
    # patch-token runs in token_ids; None for a text branch.
    images: list[str] | None = None


@dataclass
class Trace:
    """A finished, scored episode."""

    trace_id: str
    task_id: str
    env: str
    branches: list[Branch]
    reward: float = 0.0
    agent_rewards: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 1
    is_truncated: bool = False
    is_timeout: bool = False
    error: str | None = None
    policy_version: int = 0
    stop_condition: str = "stop"

    @property
    def ok(self) -> bool:
        return self.error is None and not self.is_timeout


@dataclass
class TrainingSample:
    """A branch turned into what the trainer consumes (one packed document)."""

    input_ids: list[int]
    loss_mask: list[bool]
    advantages: list[float]
    inference_logprobs: list[float]
    temperature: float
    rl_weights: list[float]
    ce_weights: list[float]
    ref_kl_weights: list[float]
    env_name: str
    trace_id: str = ""
    branch_index: int = 0
    ref_logprobs: list[float] | None = None
    sampling_mask: list[list[int]] | None = None  # sampling replay (see Branch)
    sampling_mask_logprobs: list[list[float]] | None = None
    routed_experts: list[list[int]] | None = None  # routing replay (see Branch)
    images: list[str] | None = None  # a vision-language prompt's images (see Branch)
