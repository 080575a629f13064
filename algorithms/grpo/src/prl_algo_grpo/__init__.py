"""prl algorithm plugin ``grpo``. Its per-token weight helpers are core's :mod:`prl.advantages`."""

from prl_algo_grpo.algorithm import GRPO

__all__ = ["GRPO"]
