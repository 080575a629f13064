"""prl algorithm plugin ``grpo`` and the per-token weight helpers other algorithms reuse."""

from prl_algo_grpo.algorithm import GRPO
from prl_algo_grpo.tokens import assign, assign_branch, context_tokens, sampled_tokens

__all__ = ["GRPO", "assign", "assign_branch", "context_tokens", "sampled_tokens"]
