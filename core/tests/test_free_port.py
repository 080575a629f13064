"""Ports picked for a server before it starts (its clients are told first) must stay free
until the server binds them: they are drawn from outside the kernel's ephemeral range, from
which every bind to port 0 and every outgoing connection takes its port."""

from __future__ import annotations

import random
import socket

from prl import serving
from prl.serving import bind, ephemeral_ports, free_port


def test_picked_ports_lie_outside_the_ephemeral_range_and_bind():
    lo, hi = ephemeral_ports()
    for _ in range(20):
        port = free_port("127.0.0.1")
        assert not lo <= port <= hi, (port, lo, hi)
        assert port >= 1024
        bind("127.0.0.1", port).close()


def test_a_port_in_use_is_never_picked(monkeypatch):
    held = socket.socket()
    held.bind(("127.0.0.1", free_port("127.0.0.1")))
    held.listen(1)
    taken = held.getsockname()[1]
    # The held port is the only candidate: every draw fails to bind it, so the pick falls
    # back to a port the kernel hands out, never the held one.
    monkeypatch.setattr(serving, "_candidates", lambda: [taken] * 1000)
    try:
        assert all(free_port("127.0.0.1") != taken for _ in range(5))
    finally:
        held.close()


def test_processes_seeded_alike_draw_different_ports():
    draws = []
    for _ in range(4):
        random.seed(0)
        draws.append(free_port("127.0.0.1"))
    assert len(set(draws)) > 1, draws


def test_no_room_outside_the_range_falls_back_to_any_free_port(monkeypatch):
    monkeypatch.setattr(serving, "ephemeral_ports", lambda: (1024, 65535))
    port = free_port("127.0.0.1")
    assert 1024 <= port <= 65535
    bind("127.0.0.1", port).close()


def test_a_process_never_picks_the_same_port_twice(monkeypatch):
    """The engines behind a router, or the inference port and then the NCCL port, are picked
    one after another before any of their servers listens: each pick must differ."""
    lo, hi = ephemeral_ports()
    ports = [p for p in range(20000, 21000) if not lo <= p <= hi][:3]
    monkeypatch.setattr(serving, "_HANDED_OUT", set())
    monkeypatch.setattr(serving, "_candidates", lambda: ports * 400)  # three free ports, drawn often
    picks = [free_port("127.0.0.1") for _ in range(4)]
    assert sorted(picks[:3]) == sorted(ports)
    assert picks[3] not in ports  # the pool is spent: the kernel hands out another
