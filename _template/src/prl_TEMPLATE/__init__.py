"""prl plugin TEMPLATE (see :mod:`prl_TEMPLATE.plugin`)."""
