"""prl loss plugin ``icepop`` (see :mod:`prl_loss_icepop.loss`)."""
