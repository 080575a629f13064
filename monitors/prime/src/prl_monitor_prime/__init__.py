"""prl monitor plugin ``prime``: runs on the Prime Intellect platform through ``prime-runs``."""

from prl_monitor_prime.monitor import PrimeMonitor

__all__ = ["PrimeMonitor"]
