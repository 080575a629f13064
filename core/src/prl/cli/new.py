"""``prl new plugin KIND NAME``: scaffold a working plugin distribution (see :mod:`prl.scaffold`)."""

from __future__ import annotations

from pathlib import Path

import typer

from prl.cli.errors import USAGE_EXIT, print_error

new_app = typer.Typer(
    name="new",
    help="Create new things from templates.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_KINDS_HELP = (
    "algorithm, loss, renderer, monitor, weight-transport, launcher, inference-backend, taskset or trainer "
    "(the plural spellings of `prl plugins` work too)."
)


@new_app.command("plugin")
def new_plugin(
    kind: str = typer.Argument(..., metavar="KIND", help=_KINDS_HELP, show_default=False),
    name: str = typer.Argument(
        ..., metavar="NAME", help="Lowercase letters, digits and hyphens, e.g. my-thing.", show_default=False
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        metavar="DIR",
        help="Directory to create (default: ./prl-<kind prefix>-NAME).",
        show_default=False,
    ),
) -> None:
    """Scaffold a plugin distribution with a working implementation and its tests.

    Example: prl new plugin algorithm my-thing (writes ./prl-algo-my-thing).
    """
    from prl.scaffold import ScaffoldError, scaffold

    try:
        names, target, files = scaffold(kind, name, out)
    except ScaffoldError as exc:
        print_error(str(exc), "Usage error")
        raise typer.Exit(USAGE_EXIT) from None
    t = names.template
    print(f'Created {names.dist} in {target} ({t.alias}, {t.tag_attr} = "{names.tag}"):')
    for rel in files:
        print(f"  {rel}")
    print("Next:")
    print(f"  pip install -e {target}")
    print(f"  prl plugins            # lists {names.dist}")
    print(f"  pytest {target / 'tests'}")
