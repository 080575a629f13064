"""The zmq rollout transport: each trainer rank gets its own micro-batches of the step it
asks for, before or after the orchestrator ships it, across an orchestrator restart."""

from __future__ import annotations

import threading

import pytest

from prl.config.sections import RolloutTransportConfig
from prl.orchestrator.rollout import open_receiver, open_sender
from prl.serving import free_port


@pytest.fixture
def cfg():
    return RolloutTransportConfig(type="zmq", port=free_port("127.0.0.1"))


def test_each_rank_receives_its_own_batch(cfg, tmp_path):
    sender = open_sender(cfg, tmp_path)
    ranks = [[{"input_ids": [1, 2], "loss_mask": [False, True]}], [{"input_ids": [3]}]]
    r0, r1 = open_receiver(cfg, tmp_path, 0), open_receiver(cfg, tmp_path, 1)
    try:
        sender.send(1, ranks)
        assert r1.receive(1, timeout=5) == ranks[1]
        assert r0.receive(1, timeout=5) == ranks[0]
        assert not (tmp_path / "batches").exists()  # nothing on disk
    finally:
        for end in (r0, r1, sender):
            end.close()


def test_a_request_before_the_step_ships_is_answered_when_it_does(cfg, tmp_path):
    sender = open_sender(cfg, tmp_path)
    receiver = open_receiver(cfg, tmp_path, 0)
    try:
        threading.Timer(0.3, sender.send, (1, [[{"input_ids": [7]}]])).start()
        assert receiver.receive(1, timeout=5) == [{"input_ids": [7]}]
    finally:
        receiver.close()
        sender.close()


def test_steps_come_in_the_order_asked_and_older_ones_can_be_fetched_again(cfg, tmp_path):
    sender = open_sender(cfg, tmp_path)
    receiver = open_receiver(cfg, tmp_path, 0)
    try:
        for step in (1, 2, 3):
            sender.send(step, [[{"step": step}]])
        assert [receiver.receive(s, timeout=5) for s in (2, 3, 1)] == [[{"step": 2}], [{"step": 3}], [{"step": 1}]]
    finally:
        receiver.close()
        sender.close()


def test_a_trainer_waiting_across_an_orchestrator_restart_gets_its_batch(cfg, tmp_path):
    first = open_sender(cfg, tmp_path)
    receiver = open_receiver(cfg, tmp_path, 0)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(receiver.receive(4, timeout=10)))
    waiter.start()
    first.close()  # the orchestrator dies with the request unanswered
    second = open_sender(cfg, tmp_path)
    try:
        second.send(4, [[{"input_ids": [4]}]])
        waiter.join(timeout=10)
        assert got == [[{"input_ids": [4]}]]
    finally:
        receiver.close()
        second.close()


def test_a_missing_orchestrator_times_out_naming_the_address(cfg, tmp_path):
    receiver = open_receiver(cfg, tmp_path, 1)
    try:
        with pytest.raises(TimeoutError, match=rf"batch step 2 rank 1 .*127\.0\.0\.1:{cfg.port}"):
            receiver.receive(2, timeout=0.3)
    finally:
        receiver.close()


def test_a_taken_port_names_the_field(cfg, tmp_path, monkeypatch):
    monkeypatch.setattr("prl.orchestrator.transport_zmq.BIND_RETRY_S", 0.2)
    sender = open_sender(cfg, tmp_path)
    try:
        with pytest.raises(OSError, match=rf"rollout_transport.port {cfg.port}"):
            open_sender(cfg, tmp_path)
    finally:
        sender.close()


def test_filesystem_is_the_default_and_uses_disk(tmp_path):
    cfg = RolloutTransportConfig()
    sender, receiver = open_sender(cfg, tmp_path), open_receiver(cfg, tmp_path, 0)
    sender.send(1, [[{"input_ids": [1]}]])
    assert receiver.receive(1, timeout=1) == [{"input_ids": [1]}]
    assert (tmp_path / "batches" / "step_1" / "rank_0.bin").exists()
