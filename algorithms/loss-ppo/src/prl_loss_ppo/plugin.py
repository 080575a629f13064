"""Registers the ``ppo`` loss with prl."""

from prl import hookimpl
from prl_loss_ppo.loss import PPOLoss


@hookimpl
def prl_register_losses():
    return [PPOLoss]
