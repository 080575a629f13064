"""Registers the ``opsd`` algorithm with prl."""

from prl import hookimpl
from prl_algo_opsd.algorithm import OPSD


@hookimpl
def prl_register_algorithms():
    return [OPSD]
