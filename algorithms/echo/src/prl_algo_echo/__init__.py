"""prl algorithm plugin ``echo`` (see :mod:`prl_algo_echo.algorithm`)."""

from prl_algo_echo.algorithm import Echo

__all__ = ["Echo"]
