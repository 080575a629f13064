"""prl's local launcher: every process of a run on this machine."""

from prl_launcher_local.launcher import LocalLauncher

__all__ = ["LocalLauncher"]
