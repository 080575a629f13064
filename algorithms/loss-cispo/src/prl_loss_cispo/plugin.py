"""Registers the ``cispo`` loss with prl."""

from prl import hookimpl
from prl_loss_cispo.loss import CISPOLoss


@hookimpl
def prl_register_losses():
    return [CISPOLoss]
