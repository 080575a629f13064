"""The broadcast group over gloo on CPU: every tensor arrives bit-exact whatever the
bucketing, and each way a group goes wrong fails at once with one line naming the stage
and the peer instead of hanging. Members run as threads of this process (each with its own
store client and process group), which is all the group needs."""

from __future__ import annotations

import threading

import pytest
import torch
from prl_weights_nccl.group import BroadcastError, join, plan_buckets

from prl.serving import free_port


def _run(*targets):
    results: list = [None] * len(targets)

    def wrap(i, fn):
        try:
            results[i] = fn()
        except BaseException as exc:  # noqa: BLE001 - compared by the test
            results[i] = exc

    threads = [threading.Thread(target=wrap, args=(i, fn)) for i, fn in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def _state():
    torch.manual_seed(0)
    return {
        "embed.weight": torch.randn(50, 8),
        "layer.0.weight": torch.randn(8, 8, dtype=torch.bfloat16),
        "layer.0.bias": torch.randn(8, dtype=torch.bfloat16),
        "head.weight": torch.randn(300, 8),  # bigger than a bucket: travels alone
        "steps": torch.tensor([3], dtype=torch.int64),
    }


def test_a_version_arrives_exactly_in_buckets():
    port, state, got = free_port("127.0.0.1"), _state(), {}

    def trainer():
        join("127.0.0.1", port, 0, 3, 20, "gloo").send(state, 7, bucket_bytes=4096)

    def worker(rank):
        def sink(pairs):
            got.setdefault(rank, {}).update({n: t.clone() for n, t in pairs})

        return join("127.0.0.1", port, rank, 3, 20, "gloo").receive(sink)

    results = _run(trainer, lambda: worker(1), lambda: worker(2))
    assert results == [None, 7, 7]
    for rank in (1, 2):
        assert list(got[rank]) == list(state)
        for name, tensor in state.items():
            assert got[rank][name].dtype == tensor.dtype and torch.equal(got[rank][name], tensor), name


def test_buckets_are_consecutive_single_dtype_and_bounded():
    entries = [("a", "float32", [10]), ("b", "float32", [10]), ("c", "bfloat16", [4]), ("d", "float32", [100])]
    assert plan_buckets(entries, 80) == [[0, 1], [2], [3]]
    assert plan_buckets(entries, 40) == [[0], [1], [2], [3]]


def test_a_refused_manifest_changes_nothing_and_leaves_the_sender_unblocked():
    port, state, sunk = free_port("127.0.0.1"), _state(), []

    def trainer():
        join("127.0.0.1", port, 0, 2, 20, "gloo").send(state, 1, bucket_bytes=4096)

    def worker():
        group = join("127.0.0.1", port, 1, 2, 20, "gloo")
        return group.receive(sunk.append, check=lambda entries: "shape mismatch: head.weight")

    sent, received = _run(trainer, worker)
    assert sent is None and not sunk
    assert isinstance(received, BroadcastError) and "head.weight" in str(received)


def test_a_missing_inference_worker_is_named_instead_of_a_hang():
    port = free_port("127.0.0.1")
    trainer, _ = _run(lambda: join("127.0.0.1", port, 0, 3, 2, "gloo"), lambda: _announce(port, 1, 3))
    assert isinstance(trainer, BroadcastError)
    message = str(trainer)
    assert "(join)" in message and "missing [2]" in message and f"127.0.0.1:{port}" in message
    assert "\n" not in message


def _announce(port, rank, world):
    try:
        join("127.0.0.1", port, rank, world, 2, "gloo")
    except BroadcastError:
        pass


def test_a_wrong_world_size_fails_both_sides_with_the_sizes():
    port = free_port("127.0.0.1")
    trainer, worker = _run(
        lambda: join("127.0.0.1", port, 0, 2, 10, "gloo"), lambda: join("127.0.0.1", port, 1, 3, 10, "gloo")
    )
    for result in (trainer, worker):
        assert isinstance(result, BroadcastError), result
        assert "expects a group of 3 but the trainer's has 2" in str(result)


def test_a_taken_port_names_the_setting():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(BroadcastError, match=rf"\(listen\).*127.0.0.1:{port} \(weight_broadcast.port"):
            join("127.0.0.1", port, 0, 2, 2, "gloo")


def test_an_inference_worker_that_dies_ends_the_send_with_one_line():
    import subprocess
    import sys

    port = free_port("127.0.0.1")
    code = (
        f"from prl_weights_nccl.group import join; import os; join('127.0.0.1', {port}, 1, 2, 120, 'gloo'); os._exit(0)"
    )
    worker = subprocess.Popen([sys.executable, "-c", code])
    # Generous waits: on a loaded machine the worker alone can take tens of seconds to import torch.
    group = join("127.0.0.1", port, 0, 2, 120, "gloo")
    worker.wait(120)
    with pytest.raises(BroadcastError, match=r"\(send version 3\): rank 0 lost the inference workers") as info:
        group.send(_state(), 3, bucket_bytes=4096)
    assert "\n" not in str(info.value)
