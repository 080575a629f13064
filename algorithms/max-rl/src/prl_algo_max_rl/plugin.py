"""Registers the ``max_rl`` algorithm with prl."""

from prl import hookimpl
from prl_algo_max_rl.algorithm import MaxRL


@hookimpl
def prl_register_algorithms():
    return [MaxRL]
