"""Install hints: which distribution provides a tag, so a config naming a plugin that is not
installed can say what to install. Core keeps no list of its own: catalogues are data that
other distributions publish under the ``prl.catalogue`` entry-point group, each a dict
``{distribution: {"folder": path in its repository, kind: [tags]}}`` (the ``prl``
distribution publishes the in-repo one, generated from packages/prl/packs.toml). Nothing
here selects or configures a plugin; installed plugins are found through their entry points."""

from __future__ import annotations

import functools
from importlib.metadata import entry_points

GROUP = "prl.catalogue"


@functools.cache
def providers() -> dict[tuple[str, str], tuple[str, str]]:
    """``(kind, tag) -> (distribution, folder)`` over every installed catalogue."""
    found: dict[tuple[str, str], tuple[str, str]] = {}
    for ep in entry_points(group=GROUP):
        try:
            catalogue = ep.load()
        except Exception:  # a broken catalogue must not turn a config error into a crash
            continue
        for dist, entry in catalogue.items():
            folder = entry.get("folder", dist)
            for kind, tags in entry.items():
                for tag in tags if kind != "folder" else ():
                    found.setdefault((kind, tag), (dist, folder))
    return found


def install_hint(kind: str, tag: object) -> str:
    """``"; install the distribution 'prl-x' (...)"`` for a catalogued tag, else ``""``."""
    hit = providers().get((kind, tag)) if isinstance(tag, str) else None
    if hit is None:
        return ""
    dist, folder = hit
    return (
        f"; install the distribution '{dist}' (pip install {dist}, or pip install -e <repo>/{folder} from a checkout)"
    )
