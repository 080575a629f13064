"""prl algorithm plugin ``debug`` (see :mod:`prl_algo_debug.algorithm`)."""

from prl_algo_debug.algorithm import Debug

__all__ = ["Debug"]
