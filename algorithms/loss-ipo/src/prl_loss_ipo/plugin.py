"""Registers the ``ipo`` loss with prl."""

from prl import hookimpl
from prl_loss_ipo.loss import IPOLoss


@hookimpl
def prl_register_losses():
    return [IPOLoss]
