"""Forming the broadcast group: which backend and device a member gets, who the trainer
waits for, and the one line every member sees when the group cannot form. Gloo on CPU; the
NCCL path runs against a recording stand-in for ``ProcessGroupNCCL`` (``gpu_machine``)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from prl_weights_nccl.group import BackgroundJoin, BroadcastError, join, resolve_backend

from prl.serving import free_port

HOST = "127.0.0.1"
HINT = "is inference up, started with the nccl transport, and its worker count equal to "
HINT += "weight_broadcast.inference_world_size?"


@pytest.mark.parametrize(
    "backend,gpu,expected",
    [("auto", True, "nccl"), ("auto", False, "gloo"), ("gloo", True, "gloo"), ("nccl", False, "nccl")],
)
def test_auto_picks_nccl_only_where_a_gpu_is_visible_and_an_explicit_backend_is_kept(
    monkeypatch, backend, gpu, expected
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    assert resolve_backend(backend) == expected


def test_an_nccl_member_receives_on_its_current_gpu_with_the_configured_timeout(gpu_machine):
    group = join(HOST, free_port(HOST), 0, 1, 7)  # backend "auto" on a GPU machine
    assert isinstance(group.pg, gpu_machine)
    assert (group.pg.rank, group.pg.world) == (0, 1)
    assert isinstance(group.pg.store, dist.PrefixStore)
    assert group.pg.opts._timeout == timedelta(seconds=7)
    assert group.device == torch.device("cuda", 1)  # the worker's own GPU, not cuda:0


def test_gloo_asked_for_on_a_gpu_machine_stays_on_the_cpu(gpu_machine):
    group = join(HOST, free_port(HOST), 0, 1, 7, "gloo")
    assert isinstance(group.pg, dist.ProcessGroupGloo)
    assert group.device == torch.device("cpu")


@pytest.mark.parametrize(
    "error,reason",
    [
        (RuntimeError("NCCL error in: init.cc:42, unhandled system error\nLast error:\nsocket"), "NCCL error in: "
         "init.cc:42, unhandled system error"),
        (RuntimeError(), "RuntimeError"),
    ],
)  # fmt: skip
def test_a_failed_nccl_init_is_one_line_naming_the_backend_and_address(gpu_machine, monkeypatch, error, reason):
    monkeypatch.setattr(gpu_machine, "fail", error)
    port = free_port(HOST)
    with pytest.raises(BroadcastError) as info:
        join(HOST, port, 0, 1, 5, "nccl")
    assert str(info.value) == f"weight broadcast (join): nccl group at {HOST}:{port} failed: {reason}"


def test_a_worker_without_a_trainer_gives_up_after_its_timeout():
    port = free_port(HOST)
    with pytest.raises(BroadcastError) as info:
        join(HOST, port, 1, 2, 0.5, "gloo")
    message = str(info.value)
    prefix = f"weight broadcast (connect): inference rank 1 cannot reach the trainer at {HOST}:{port} within 0.5s: "
    assert message.startswith(prefix)
    assert "timed out after 500ms" in message


def test_a_taken_port_gives_the_socket_error():
    import socket

    with socket.socket() as sock:
        sock.bind((HOST, 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(BroadcastError) as info:
            join(HOST, port, 0, 2, 2, "gloo")
    assert str(info.value).startswith(
        f"weight broadcast (listen): the trainer cannot listen on {HOST}:{port} "
        "(weight_broadcast.port; taken by another run?): "
    )
    assert "address already in use" in str(info.value)


def test_a_worker_whose_trainer_never_forms_the_group_gives_up_after_its_timeout():
    port = free_port(HOST)
    # The trainer's store is up (its process started) but it never publishes a verdict.
    trainer = dist.TCPStore(HOST, port, 2, is_master=True, timeout=timedelta(seconds=10), wait_for_workers=False)
    with pytest.raises(BroadcastError) as info:
        join(HOST, port, 1, 2, 0.5, "gloo")
    message = str(info.value)
    assert message.startswith(
        f"weight broadcast (join): inference rank 1 waited 0.5s for the trainer at {HOST}:{port}: "
    )
    assert "timeout after 500ms" in message
    assert trainer.get("prl/joined/1") == b"2"  # it did announce the group size it expects


def test_every_member_that_joined_hears_which_rank_is_missing(members):
    port = free_port(HOST)
    trainer, worker = members(lambda: join(HOST, port, 0, 3, 1.5, "gloo"), lambda: join(HOST, port, 2, 3, 10, "gloo"))
    expected = (
        f"weight broadcast (join): waited 1.5s at {HOST}:{port} for 2 inference worker(s); "
        f"joined ranks [2], missing [1]: {HINT}"
    )
    assert isinstance(trainer, BroadcastError) and str(trainer) == expected
    assert isinstance(worker, BroadcastError) and str(worker) == expected  # the trainer's verdict, not a timeout


def test_a_trainer_alone_says_no_worker_joined():
    port = free_port(HOST)
    with pytest.raises(BroadcastError) as info:
        join(HOST, port, 0, 2, 0.3, "gloo")
    assert str(info.value) == (
        f"weight broadcast (join): waited 0.3s at {HOST}:{port} for 1 inference worker(s); "
        f"joined ranks none, missing [1]: {HINT}"
    )


def test_the_trainer_waits_for_a_worker_that_starts_after_it(members):
    port, got = free_port(HOST), {}

    def late_worker():
        time.sleep(0.3)  # inference comes up after the trainer began waiting
        return join(HOST, port, 1, 2, 10, "gloo").receive(lambda pairs: got.update(pairs))

    sent, received = members(lambda: join(HOST, port, 0, 2, 10, "gloo").send({"w": torch.ones(2)}, 2, 64), late_worker)
    assert (sent, received) == (None, 2)
    assert torch.equal(got["w"], torch.ones(2))


def test_a_wrong_world_size_names_the_worker_that_has_it(members):
    port = free_port(HOST)
    results = members(
        lambda: join(HOST, port, 0, 3, 10, "gloo"),
        lambda: join(HOST, port, 1, 3, 10, "gloo"),
        lambda: join(HOST, port, 2, 4, 10, "gloo"),
    )
    expected = (
        "weight broadcast (join): inference rank 2 expects a group of 4 but the trainer's has 3 "
        "(1 + weight_broadcast.inference_world_size)"
    )
    assert [str(r) for r in results] == [expected] * 3
    assert all(isinstance(r, BroadcastError) for r in results)


def test_a_server_that_never_joined_says_what_to_call_first():
    bg = BackgroundJoin()
    assert not bg.done()
    with pytest.raises(BroadcastError) as info:
        bg.group()
    assert str(info.value) == (
        "weight broadcast: this server has not joined a broadcast group (POST /init_broadcaster first)"
    )


def test_a_background_join_is_pending_until_the_trainer_answers_then_reports_its_verdict():
    port = free_port(HOST)
    trainer = dist.TCPStore(HOST, port, 2, is_master=True, timeout=timedelta(seconds=10), wait_for_workers=False)
    bg = BackgroundJoin()
    bg.start(HOST, port, 1, 2, 3, "gloo")
    trainer.wait(["prl/joined/1"], timedelta(seconds=10))
    assert not bg.done()
    with pytest.raises(BroadcastError) as info:
        bg.group(timeout=0.1)  # a server polling must not block for the whole join
    assert str(info.value) == "weight broadcast (join): still waiting for the trainer to form the group"
    # A daemon thread: a server shutting down mid-join is not held up until the join times out.
    joining = [t for t in threading.enumerate() if t.name == "prl-broadcast-join"]
    assert joining and all(t.daemon for t in joining)
    trainer.set("prl/verdict", "weight broadcast (join): refused by the test")
    with pytest.raises(BroadcastError) as info:
        bg.group(timeout=10)
    assert str(info.value) == "weight broadcast (join): refused by the test"
    assert bg.done()


def test_a_background_join_hands_out_a_group_that_receives(members):
    port, got, bg = free_port(HOST), {}, BackgroundJoin()

    def trainer():
        join(HOST, port, 0, 2, 10, "gloo").send({"w": torch.arange(3.0)}, 6, 64)

    def worker():
        bg.start(HOST, port, 1, 2, 10, "gloo")
        return bg.group(timeout=30).receive(lambda pairs: got.update(pairs))

    assert members(trainer, worker) == [None, 6]
    assert bg.done() and torch.equal(got["w"], torch.arange(3.0))


def test_a_background_join_uses_the_backend_it_was_given(gpu_machine):
    nccl, gloo = BackgroundJoin(), BackgroundJoin()
    nccl.start(HOST, free_port(HOST), 0, 1, 5, "nccl")
    gloo.start(HOST, free_port(HOST), 0, 1, 5, "gloo")
    assert isinstance(nccl.group(timeout=30).pg, gpu_machine)
    assert isinstance(gloo.group(timeout=30).pg, dist.ProcessGroupGloo)
