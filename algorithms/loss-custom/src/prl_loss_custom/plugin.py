"""Registers the ``custom`` loss with prl."""

from prl import hookimpl
from prl_loss_custom.loss import CustomLoss


@hookimpl
def prl_register_losses():
    return [CustomLoss]
