"""prl monitor plugin ``wandb``: metrics and episode tables to Weights & Biases."""

from prl_monitor_wandb.monitor import WandbMonitor

__all__ = ["WandbMonitor"]
