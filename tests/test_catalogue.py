"""The install-hint catalogue lives outside core (the `prl` distribution publishes it under
the `prl.catalogue` entry-point group) and must name, for every tag an installed in-repo
plugin registers, the distribution that registers it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from prl import known_plugins
from prl.plugins import KINDS, get_registry


@pytest.fixture
def fresh(monkeypatch):
    known_plugins.providers.cache_clear()
    yield monkeypatch
    known_plugins.providers.cache_clear()


# Tags that come from what a library holds, not from the distribution's own code: the chat
# template families of the `renderers` package and installed verifiers environments.
DYNAMIC = {("renderers", "prl-renderers"), ("tasksets", "prl-envs-verifiers")}
# The reference's [deployment] type spellings, catalogued beside the launcher tags they stand for.
ALIASES = {("launchers", "single_node"), ("launchers", "multi_node")}


def test_every_installed_tag_is_catalogued_under_its_distribution(fresh):
    registry, seen = get_registry(), 0
    registered = {}
    for kind in KINDS.values():
        for tag in registry.classes(kind):
            registered[(kind.name, tag)] = dist = registry.origin(kind, tag)
            if not dist.startswith("prl-") or (kind.name, dist) in DYNAMIC:
                continue  # a test's inline plugin, or a library's tag
            assert known_plugins.providers().get((kind.name, tag), ("<none>",))[0] == dist, (kind.name, tag)
            seen += 1
    assert seen >= 30
    # and no entry is stale: a catalogued tag of an installed distribution is registered by it
    installed = set(registered.values())
    for (kind, tag), (dist, _) in known_plugins.providers().items():
        if kind in KINDS and dist in installed and (kind, tag) not in ALIASES:
            assert registered.get((kind, tag)) == dist, (kind, tag, dist)


def test_catalogues_come_from_entry_points_and_a_broken_one_is_skipped(fresh):
    def broken():
        raise ImportError("gone")

    good = {"prl-loss-shiny": {"folder": "algorithms/loss-shiny", "losses": ["shiny"]}}
    eps = [SimpleNamespace(load=broken), SimpleNamespace(load=lambda: good)]
    fresh.setattr(known_plugins, "entry_points", lambda group: eps if group == known_plugins.GROUP else [])
    hint = known_plugins.install_hint("losses", "shiny")
    assert "install the distribution 'prl-loss-shiny'" in hint and "<repo>/algorithms/loss-shiny" in hint
    assert known_plugins.install_hint("losses", "dull") == ""
    assert known_plugins.install_hint("losses", 3) == ""
