"""Print usage errors the way every prl command does: a titled box on stderr, exit 2."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

USAGE_EXIT = 2


def print_error(message: str, title: str = "Config file error") -> None:
    console = Console(stderr=True, width=120, soft_wrap=True)
    if not sys.stderr.isatty():
        # plain lines for logs and pipes: first line says what went wrong
        console.print(f"{title}: " + message, markup=False, highlight=False)
        return
    console.print(Panel(Text(message), title=title, title_align="left", border_style="red"))


class MissingMachinery(Exception):
    """A command whose implementation is not installed or not built yet."""
