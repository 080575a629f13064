"""What travels through a joined group: the manifest the receiver checks, buckets handed
to the sink as they arrive, sharded parameters sent whole, every buffer on the group's
device, and the one line a member gets when its peer stops or speaks another wire format."""

from __future__ import annotations

import json

import pytest
import torch
from prl_weights_nccl.group import BroadcastError, join, plan_buckets

from prl.serving import free_port

HOST = "127.0.0.1"


class Sharded:
    """What the sender needs of a DTensor: ``full_tensor()`` gathers the whole parameter."""

    def __init__(self, full: torch.Tensor) -> None:
        self._full = full

    def full_tensor(self) -> torch.Tensor:
        return self._full


def test_buckets_accumulate_until_the_next_tensor_would_overflow():
    entries = [("a", "float32", [10]), ("b", "float32", [10]), ("c", "float32", [10]), ("d", "float32", [25])]
    assert plan_buckets(entries, 100) == [[0, 1], [2], [3]]  # 40 + 40 fits, a third 40 does not
    assert plan_buckets(entries, 120) == [[0, 1, 2], [3]]


@pytest.mark.parametrize("name", ["float99", "Tensor"])
def test_a_dtype_this_torch_does_not_have_is_named(name):
    with pytest.raises(BroadcastError) as info:
        plan_buckets([("w", name, [2])], 64)
    assert str(info.value) == f"weight broadcast (manifest): unknown dtype {name!r}"


def test_the_receiver_checks_the_manifest_then_gets_each_bucket_as_it_arrives(members):
    port, seen, sunk = free_port(HOST), [], []
    torch.manual_seed(0)
    state = {
        "embed": torch.randn(3, 2),
        "norm": torch.randn(2),
        "layer": Sharded(torch.randn(4, dtype=torch.bfloat16)),  # an FSDP parameter: sent whole
        "step": torch.tensor([9]),
    }

    def check(entries):
        seen.extend(entries)
        return None  # accepted

    def sink(pairs):
        sunk.append({n: t.clone() for n, t in pairs})

    sent, received = members(
        lambda: join(HOST, port, 0, 2, 10, "gloo").send(state, 3, bucket_bytes=32),
        lambda: join(HOST, port, 1, 2, 10, "gloo").receive(sink, check=check),
    )
    assert (sent, received) == (None, 3)
    assert seen == [("embed", "float32", [3, 2]), ("norm", "float32", [2]), ("layer", "bfloat16", [4]),
                    ("step", "int64", [1])]  # fmt: skip
    assert [list(bucket) for bucket in sunk] == [["embed", "norm"], ["layer"], ["step"]]
    arrived = {n: t for bucket in sunk for n, t in bucket.items()}
    plain = {**state, "layer": state["layer"].full_tensor()}
    for name, tensor in plain.items():
        assert arrived[name].dtype == tensor.dtype and torch.equal(arrived[name], tensor), name


def test_both_sides_keep_buffers_on_the_groups_device_whatever_the_default_device(members):
    """Inference servers set a default device (vLLM loads models under one): buffers the group
    allocates must still be on its own device, here the CPU gloo sends from."""
    port, got = free_port(HOST), {}
    state = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.arange(3, dtype=torch.bfloat16)}

    def trainer():
        with torch.device("meta"):
            join(HOST, port, 0, 2, 10, "gloo").send(state, 8, bucket_bytes=64)

    def worker():
        with torch.device("meta"):
            return join(HOST, port, 1, 2, 10, "gloo").receive(
                lambda pairs: got.update((n, t.clone()) for n, t in pairs)
            )

    assert members(trainer, worker) == [None, 8]
    assert torch.equal(got["w"], state["w"]) and torch.equal(got["b"], state["b"])


def test_a_manifest_of_another_wire_format_is_refused(members):
    port = free_port(HOST)
    future = {"wire": 2, "version": 1, "bucket_bytes": 64, "tensors": []}

    def newer_trainer():
        group = join(HOST, port, 0, 2, 10, "gloo")
        group._bcast_bytes(json.dumps(future).encode(), "send")  # what a later prl release would send
        return group

    _, received = members(newer_trainer, lambda: join(HOST, port, 1, 2, 10, "gloo").receive(lambda pairs: None))
    assert isinstance(received, BroadcastError)
    assert str(received) == "weight broadcast (manifest): wire format 2, expected 1"


def test_a_worker_whose_trainer_stops_before_the_manifest_gives_up_after_the_timeout(members):
    port = free_port(HOST)
    # The trainer joins and then never sends (it stays alive: its group is returned and held).
    trainer, received = members(
        lambda: join(HOST, port, 0, 2, 10, "gloo"),
        lambda: join(HOST, port, 1, 2, 0.5, "gloo").receive(lambda pairs: None),
    )
    assert isinstance(received, BroadcastError)
    message = str(received)
    assert message.startswith(
        f"weight broadcast (receive manifest): rank 1 lost the trainer of the group at {HOST}:{port}: "
    )
    assert "Timed out waiting 500ms" in message


def test_a_worker_whose_trainer_stops_mid_version_names_the_version(members):
    port = free_port(HOST)
    manifest = {"wire": 1, "version": 5, "bucket_bytes": 64, "tensors": [["w", "float32", [4]]]}

    def trainer():
        group = join(HOST, port, 0, 2, 10, "gloo")
        group._bcast_bytes(json.dumps(manifest).encode(), "send")  # then stops before the tensors
        return group

    _, received = members(trainer, lambda: join(HOST, port, 1, 2, 0.5, "gloo").receive(lambda pairs: None))
    assert isinstance(received, BroadcastError)
    message = str(received)
    assert message.startswith(
        f"weight broadcast (receive version 5): rank 1 lost the trainer of the group at {HOST}:{port}: "
    )
    assert "Timed out waiting 500ms" in message


def test_a_worker_whose_trainer_stops_inside_the_manifest_names_the_manifest(members):
    port = free_port(HOST)

    def trainer():
        group = join(HOST, port, 0, 2, 10, "gloo")
        group._bcast(torch.tensor([100]), "send")  # the manifest's length, never its bytes
        return group  # held: the trainer stays connected

    _, received = members(trainer, lambda: join(HOST, port, 1, 2, 0.5, "gloo").receive(lambda pairs: None))
    assert isinstance(received, BroadcastError)
    message = str(received)
    assert message.startswith(
        f"weight broadcast (receive manifest): rank 1 lost the trainer of the group at {HOST}:{port}: "
    )
    assert "Timed out waiting 500ms" in message


def test_a_worker_that_leaves_after_the_manifest_ends_the_send_with_the_version(members):
    port = free_port(HOST)

    def leaving_worker():
        group = join(HOST, port, 1, 2, 10, "gloo")
        group._bcast_bytes(None, "receive manifest")  # then returns, dropping its group and connection

    def trainer():
        # Bigger than any socket buffer: the tensors cannot be sent without a reader.
        join(HOST, port, 0, 2, 10, "gloo").send({"w": torch.zeros(16 << 20)}, 3, bucket_bytes=1 << 30)

    sent, _ = members(trainer, leaving_worker)
    assert isinstance(sent, BroadcastError)
    assert str(sent).startswith(
        f"weight broadcast (send version 3): rank 0 lost the inference workers of the group at {HOST}:{port}: "
    )
