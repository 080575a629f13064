"""prl loss plugin ``ipo`` (see :mod:`prl_loss_ipo.loss`)."""
