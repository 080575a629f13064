"""prl monitor plugin ``console``: one status line per step."""

from prl_monitor_console.monitor import ConsoleMonitor

__all__ = ["ConsoleMonitor"]
