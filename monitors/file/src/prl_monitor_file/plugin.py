"""Registers the ``file`` monitor with prl."""

from prl import hookimpl
from prl_monitor_file.monitor import FileMonitor


@hookimpl
def prl_register_monitors():
    return [FileMonitor]
