"""``prl plugins``: installed distributions, versions and what each registers."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table


def show_plugins(as_json: bool) -> int:
    from prl.plugins import KINDS, get_registry

    registry = get_registry()
    rows = []
    for plugin in registry.describe():
        rows.append(
            {
                "name": plugin.name,
                "distribution": plugin.dist,
                "version": plugin.version,
                "registers": {kind: sorted(tags) for kind, tags in plugin.registers.items()},
                "hooks": sorted(h.name for h in registry.pm.get_hookcallers(registry.pm.get_plugin(plugin.name)) or []),
            }
        )
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="prl plugins")
    table.add_column("distribution", style="cyan")
    table.add_column("version")
    table.add_column("registers")
    for row in rows:
        what = "; ".join(f"{KINDS[k].label}: {', '.join(v)}" for k, v in sorted(row["registers"].items()))
        extra = [h for h in row["hooks"] if not h.startswith("prl_register_")]
        table.add_row(row["distribution"], row["version"], what + ("; " if what and extra else "") + ", ".join(extra))
    Console().print(table)
    if not rows:
        print("no prl plugins are installed")
    return 0
