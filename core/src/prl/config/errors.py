"""Config errors: one clear message, exit code 2, no traceback."""

from __future__ import annotations


class ConfigError(Exception):
    """A usage error in config files or flags; the CLI prints it and exits 2."""

    def __init__(self, message: str, title: str = "Config file error") -> None:
        super().__init__(message)
        self.message = message
        self.title = title
