"""prl algorithm plugin ``opsd`` (see :mod:`prl_algo_opsd.algorithm`)."""

from prl_algo_opsd.algorithm import OPSD, demo_messages

__all__ = ["OPSD", "demo_messages"]
