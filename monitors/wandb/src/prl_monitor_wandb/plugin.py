"""Registers the ``wandb`` monitor with prl."""

from prl import hookimpl
from prl_monitor_wandb.monitor import WandbMonitor


@hookimpl
def prl_register_monitors():
    return [WandbMonitor]
