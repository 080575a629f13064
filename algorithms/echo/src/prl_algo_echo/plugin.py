"""Registers the ``echo`` algorithm with prl."""

from prl import hookimpl
from prl_algo_echo.algorithm import Echo


@hookimpl
def prl_register_algorithms():
    return [Echo]
