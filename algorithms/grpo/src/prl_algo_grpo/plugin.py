"""Registers the ``grpo`` algorithm with prl."""

from prl import hookimpl
from prl_algo_grpo.algorithm import GRPO


@hookimpl
def prl_register_algorithms():
    return [GRPO]
