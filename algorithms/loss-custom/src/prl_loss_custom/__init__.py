"""prl loss plugin ``custom`` (see :mod:`prl_loss_custom.loss`)."""
