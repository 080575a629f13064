"""Printing help panels at the terminal's width (``COLUMNS``, else the real terminal, else
80 columns): rich boxes, or plain indented text with ``--plain``.

Wide layout puts flag, type and description side by side when they fit the width; with
``--no-wide`` (or when a panel's flags are too long for columns) each description goes on
its own indented line under its flag. Text is never parsed as rich markup: docstrings say
``[slurm]`` and ``[model.lora]``, which markup would swallow.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

Row = tuple[str, str, str]
"""flag (or name), type, description"""


@dataclass
class HelpPanel:
    head: str
    """The path part of the title (``trainer.loss variant: PPOLoss``)."""
    doc: str = ""
    """The docstring part of the title; moved into the box when the title would not fit."""
    rows: list[Row] = field(default_factory=list)

    @property
    def title(self) -> str:
        return f"{self.head}: {self.doc}" if self.doc else self.head


# A description column narrower than this reads badly: switch to the stacked layout.
MIN_DOC_WIDTH = 28
MAX_TYPE_WIDTH = 24
# Panel borders and padding take two columns on each side.
FRAME = 4


def print_help(usage: str, doc: str, panels: list[HelpPanel], footer: str, plain: bool, wide: bool) -> None:
    console = Console(no_color=plain, highlight=False, emoji=False, markup=False)
    width = console.width
    console.print(Text(usage))
    if doc:
        console.print()
        console.print(Text(doc))
    for panel in panels:
        console.print()
        if plain:
            for line in _plain_lines(panel, width, wide):
                console.print(Text(line))
        else:
            console.print(_boxed(panel, width, wide))
    if footer:
        console.print()
        console.print(Text(footer))


def _plain_lines(panel: HelpPanel, width: int, wide: bool) -> list[str]:
    lines = textwrap.wrap(panel.title, width, subsequent_indent="  ") or [panel.head]
    for flag, tp, desc in panel.rows:
        head = f"  {flag} {tp}".rstrip()
        if wide:
            lines += textwrap.wrap(f"{head}  {desc}", width, subsequent_indent="      ", break_on_hyphens=False)
        else:
            lines += textwrap.wrap(head, width, subsequent_indent="      ", break_on_hyphens=False)
            lines += textwrap.wrap(desc, width, initial_indent="      ", subsequent_indent="      ")
    return lines


def _boxed(panel: HelpPanel, width: int, wide: bool) -> Panel:
    inner = width - FRAME
    title, body = panel.title, [] if not panel.rows else [_rows(panel.rows, inner, wide)]
    if len(title) + 6 > width:
        # a long docstring would be cut off in the border: say it inside the box instead
        title = panel.head
        if panel.doc:
            body.insert(0, Text(panel.doc, style="italic"))
    return Panel(Group(*body), title=Text(title), title_align="left", box=box.ROUNDED, width=width)


def _rows(rows: list[Row], inner: int, wide: bool) -> RenderableType:
    flag_w = max(len(f) for f, _, _ in rows)
    type_w = min(max(len(t) for _, t, _ in rows), MAX_TYPE_WIDTH)
    if wide and inner - flag_w - type_w - 4 >= MIN_DOC_WIDTH:
        table = Table(box=None, show_header=False, pad_edge=False, expand=True, padding=(0, 2, 0, 0))
        table.add_column(style="cyan", no_wrap=True, width=flag_w)
        table.add_column(style="yellow", width=type_w, overflow="fold")
        table.add_column(overflow="fold", ratio=1)
        for flag, tp, desc in rows:
            table.add_row(Text(flag), Text(tp), Text(desc))
        return table
    items: list[RenderableType] = []
    for flag, tp, desc in rows:
        items.append(Text.assemble((flag, "cyan"), " ", (tp, "yellow"), overflow="fold"))
        items.append(Padding(Text(desc, overflow="fold"), (0, 0, 0, 4)))
    return Group(*items)
