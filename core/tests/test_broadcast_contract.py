"""core's in-band receive side: a backend asks core for the join object, never the
transport's modules; what is installed decides what it gets."""

from __future__ import annotations

import pytest

from prl.contracts.broadcast import BroadcastError, broadcast_join
from prl.plugins import get_registry


def test_the_installed_in_band_transport_gives_the_join():
    pytest.importorskip("prl_weights_nccl")
    joiner = broadcast_join()
    assert type(joiner) is type(broadcast_join("nccl"))
    assert joiner.done() is False  # not started: nothing joined, nothing failed
    with pytest.raises(BroadcastError, match="POST /init_broadcaster first"):
        joiner.group(0)


def test_a_file_transport_or_a_missing_one_is_one_line():
    pytest.importorskip("prl_weights_filesystem")
    with pytest.raises(LookupError, match="'filesystem' is not installed where inference runs, or sends files"):
        broadcast_join("filesystem")
    with pytest.raises(LookupError, match="'carrier-pigeon'"):
        broadcast_join("carrier-pigeon")


def test_no_in_band_transport_installed_is_named(monkeypatch):
    registry = get_registry()
    files_only = {t: c for t, c in registry.classes("weight_transports").items() if not hasattr(c, "broadcast_join")}
    monkeypatch.setattr(registry, "classes", lambda kind: files_only)
    with pytest.raises(LookupError, match=r"exactly one in-band weight transport .*\(found: none\)"):
        broadcast_join()
