"""Logging of every prl process: level, text or NDJSON lines, and the component log file.

One function, :func:`setup_logging`, configures the root logger from a ``[log]`` section:

* the level is ``log.level``; its default comes from ``$PRL_LOG_LEVEL``, else
  ``$PRIME_LOG_LEVEL`` (the reference's name, kept as an alias), else ``info``
  (:func:`default_level`, read when a config is resolved);
* ``log.json_logging`` writes one JSON object per line (``time``, ``level``, ``logger``,
  ``message``, ``exc_info`` when there is one) instead of text;
* a component that runs in the launching process (``prl sft`` without online eval,
  ``prl eval``) also writes its lines to ``logs/attempt_N/<component>.log``, the file a
  launcher gives a child it starts. ``$PRL_LOG_FILE`` carries that path into torchrun's
  ranks, where only rank 0 writes it.

Processes a component spawns itself (env servers) get its level and format through
:func:`child_env` (``$PRL_LOG_LEVEL``, ``$PRL_JSON_LOGGING``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from prl.config.errors import ConfigError

LEVELS = ("debug", "info", "warning", "error")
LOG_FILE_ENV = "PRL_LOG_FILE"
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_OURS = "_prl_handler"
JSON_ENV = "PRL_JSON_LOGGING"
_current: dict[str, str] = {}
FILE_ONLY = {"prl_file_only": True}
"""``extra=`` for a record that goes to the log file but not to the console, for lines the
console already shows in its own form (progress, a summary table)."""


def _not_file_only(record: logging.LogRecord) -> bool:
    return not getattr(record, "prl_file_only", False)


def default_level() -> str:
    """``$PRL_LOG_LEVEL``, else ``$PRIME_LOG_LEVEL``, else ``info``; a bad value is a usage
    error naming the variable."""
    for name in ("PRL_LOG_LEVEL", "PRIME_LOG_LEVEL"):
        value = os.environ.get(name, "").strip()
        if value:
            if value.lower() not in LEVELS:
                raise ConfigError(f"${name}: '{value}' is not a log level (one of {', '.join(LEVELS)})")
            return value.lower()
    return "info"


class JsonFormatter(logging.Formatter):
    """One JSON object per record (NDJSON), for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        row: dict[str, Any] = {
            "time": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            row["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(row, ensure_ascii=False)


def _formatter(json_logging: bool) -> logging.Formatter:
    if json_logging:
        return JsonFormatter()
    fmt = logging.Formatter(_TEXT_FORMAT)
    fmt.converter = time.localtime
    return fmt


class _Stderr(logging.StreamHandler):
    """Writes to the ``sys.stderr`` of the moment, not the one it was built with: a process
    that swaps stderr (a test runner capturing output, a redirect) and later closes the old
    stream would otherwise see every later line fail with a logging error."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ assigns it; stderr is read live
        pass


# HTTP clients log every request at info (the hub client, the env-server client); a user
# asked for info wants prl's lines, so these speak from warning unless debug is asked for.
_CHATTY = ("httpx", "httpx2", "httpcore", "urllib3")


def _rank_zero() -> bool:
    return os.environ.get("RANK", "0") == "0"


def setup_logging(log: Any, file: str | os.PathLike | None = None) -> None:
    """Configure the root logger from ``log`` (a ``LogConfig``): stderr, plus ``file`` (or
    ``$PRL_LOG_FILE``) on rank 0. Calling it again replaces what an earlier call set up."""
    level = getattr(log, "level", None) or default_level()
    json_logging = bool(getattr(log, "json_logging", os.environ.get(JSON_ENV) == "1"))
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, _OURS, False)]:
        root.removeHandler(handler)
        handler.close()
    console = _Stderr()
    console.addFilter(_not_file_only)
    handlers: list[logging.Handler] = [console]
    target = file or os.environ.get(LOG_FILE_ENV)
    if target and _rank_zero():
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(target, encoding="utf-8"))
    for handler in handlers:
        handler.setFormatter(_formatter(json_logging))
        setattr(handler, _OURS, True)
        root.addHandler(handler)
    root.setLevel(level.upper())
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.DEBUG if level.lower() == "debug" else logging.WARNING)
    _current.update({"PRL_LOG_LEVEL": level.lower(), JSON_ENV: "1" if json_logging else "0"})


def child_env() -> dict[str, str]:
    """Environment for a process this one spawns, so it logs at the same level and format."""
    return dict(_current)
