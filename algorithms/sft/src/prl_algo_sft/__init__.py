"""prl algorithm plugin ``sft`` (see :mod:`prl_algo_sft.algorithm`)."""

from prl_algo_sft.algorithm import SFT

__all__ = ["SFT"]
