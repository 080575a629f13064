"""Registers the ``sft`` algorithm with prl."""

from prl import hookimpl
from prl_algo_sft.algorithm import SFT


@hookimpl
def prl_register_algorithms():
    return [SFT]
