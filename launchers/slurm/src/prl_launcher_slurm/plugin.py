"""Registers the SLURM launcher with prl."""

from prl import hookimpl
from prl_launcher_slurm.launcher import SlurmLauncher


@hookimpl
def prl_register_launchers():
    return [SlurmLauncher]
