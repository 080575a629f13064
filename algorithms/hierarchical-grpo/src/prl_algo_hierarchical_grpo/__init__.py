"""prl algorithm plugin ``hierarchical_grpo`` (see :mod:`prl_algo_hierarchical_grpo.algorithm`)."""

from prl_algo_hierarchical_grpo.algorithm import HierarchicalGRPO

__all__ = ["HierarchicalGRPO"]
