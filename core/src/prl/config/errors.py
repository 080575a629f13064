"""Config errors: one clear message, exit code 2, no traceback."""

from __future__ import annotations


class ConfigError(Exception):
    """A usage error in config files or flags; the CLI prints it and exits 2."""

    def __init__(self, message: str, title: str = "Config file error") -> None:
        super().__init__(message)
        self.message = message
        self.title = title


class DataError(ConfigError, ValueError):
    """A bad dataset (a row, a column, a split): printed like a config error, exit 2.
    Also a ValueError, so code that validates data can be tested as such."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "Data error")


class HostError(ConfigError, OSError):
    """The machine stops the run, not the config: an unwritable directory, a full disk, a
    port already taken. Printed in one line like a config error, exit 2; also an OSError so
    code without the CLI handles it as one."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "Environment error")


class RunError(RuntimeError):
    """A run stopped by a failure that is neither the config nor the machine (a peer that
    went away, a collective that failed): the CLI prints the one-line message and exits 1,
    without a traceback."""


def host_error(exc: OSError, doing: str) -> HostError:
    """``exc`` as one line that says what prl was doing: ``<doing>: <reason> (<path>)``."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    where = f" ({exc.filename})" if exc.filename else ""
    return HostError(f"{doing}: {reason}{where}")
