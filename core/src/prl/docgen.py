"""Generate docs/hooks.md from the hookspec docstrings (the only place hooks are documented).

Run ``python -m prl.docgen docs/hooks.md``; a test fails when the file is out of date.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

from prl import hookspecs


def hook_functions() -> list:
    return [obj for name, obj in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("prl_")]


def render() -> str:
    lines = [
        "# Plugin hooks",
        "",
        "Generated from `core/src/prl/hookspecs.py` by `python -m prl.docgen docs/hooks.md`;",
        "do not edit by hand. A plugin implements hooks with `@prl.hookimpl` in the module its",
        "`[project.entry-points.prl]` entry names.",
        "",
    ]
    for fn in sorted(hook_functions(), key=lambda f: f.__code__.co_firstlineno):
        sig = str(inspect.signature(fn)).replace("'", "")
        lines += [f"## `{fn.__name__}{sig}`", "", inspect.cleandoc(fn.__doc__ or ""), ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else Path("docs/hooks.md")
    target.write_text(render())
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
