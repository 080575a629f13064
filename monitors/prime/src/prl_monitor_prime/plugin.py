"""Registers the ``prime`` monitor with prl."""

from prl import hookimpl
from prl_monitor_prime.monitor import PrimeMonitor


@hookimpl
def prl_register_monitors():
    return [PrimeMonitor]
