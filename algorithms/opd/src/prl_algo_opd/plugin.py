"""Registers the ``opd`` algorithm with prl."""

from prl import hookimpl
from prl_algo_opd.algorithm import OPD


@hookimpl
def prl_register_algorithms():
    return [OPD]
