"""Registers the ``icepop`` loss with prl."""

from prl import hookimpl
from prl_loss_icepop.loss import IcePopLoss


@hookimpl
def prl_register_losses():
    return [IcePopLoss]
