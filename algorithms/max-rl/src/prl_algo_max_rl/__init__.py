"""prl algorithm plugin ``max_rl`` (see :mod:`prl_algo_max_rl.algorithm`)."""

from prl_algo_max_rl.algorithm import MaxRL

__all__ = ["MaxRL"]
