"""prl's SLURM launcher: a run as one sbatch job, on one node or across several."""

from prl_launcher_slurm.launcher import SlurmLauncher

__all__ = ["SlurmLauncher"]
