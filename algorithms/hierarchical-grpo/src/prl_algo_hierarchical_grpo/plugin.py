"""Registers the ``hierarchical_grpo`` algorithm with prl."""

from prl import hookimpl
from prl_algo_hierarchical_grpo.algorithm import HierarchicalGRPO


@hookimpl
def prl_register_algorithms():
    return [HierarchicalGRPO]
