"""prl dashboard: a local read-only web view of prl run directories (``docs/dashboard.md``)."""

from prl_dashboard.cli import main

__all__ = ["main"]
