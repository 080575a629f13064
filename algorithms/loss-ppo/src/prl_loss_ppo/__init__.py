"""prl loss plugin ``ppo`` (see :mod:`prl_loss_ppo.loss`)."""
