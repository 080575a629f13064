"""Registers the ``debug`` algorithm with prl."""

from prl import hookimpl
from prl_algo_debug.algorithm import Debug


@hookimpl
def prl_register_algorithms():
    return [Debug]
