"""Registers the ``console`` monitor with prl."""

from prl import hookimpl
from prl_monitor_console.monitor import ConsoleMonitor


@hookimpl
def prl_register_monitors():
    return [ConsoleMonitor]
