"""prl algorithm plugin ``rae`` (see :mod:`prl_algo_rae.algorithm`)."""

from prl_algo_rae.algorithm import RAE

__all__ = ["RAE"]
