"""Registers the ``rae`` algorithm with prl."""

from prl import hookimpl
from prl_algo_rae.algorithm import RAE


@hookimpl
def prl_register_algorithms():
    return [RAE]
