"""Registers the local launcher with prl."""

from prl import hookimpl
from prl_launcher_local.launcher import LocalLauncher


@hookimpl
def prl_register_launchers():
    return [LocalLauncher]
