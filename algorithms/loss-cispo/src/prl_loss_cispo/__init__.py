"""prl loss plugin ``cispo`` (see :mod:`prl_loss_cispo.loss`)."""
