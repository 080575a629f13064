"""The files a publish writes: every tensor under its own name with its values, shards
split at the byte limit with an index that points at the right file, adapters in the PEFT
layout, and what inference can load from them."""

from __future__ import annotations

import json
import threading
import time

import pytest
from prl_weights_filesystem.transport import FilesystemWeights, save_safetensors

torch = pytest.importorskip("torch")
from safetensors import safe_open  # noqa: E402  (after the torch skip)
from safetensors.torch import load_file  # noqa: E402


def numbered(n: int, size: int = 256) -> dict[str, torch.Tensor]:
    """n float32 tensors of ``size`` values (size * 4 bytes), each holding its own index."""
    return {f"layer{i}.weight": torch.full((size,), float(i)) for i in range(n)}


def test_shards_fill_up_to_the_limit_and_the_index_maps_every_tensor(tmp_path):
    state = numbered(5)  # 1 KiB each
    names = save_safetensors(state, tmp_path, max_shard_bytes=2048)  # exactly two fit
    assert names == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index["metadata"] == {"total_size": 5 * 1024}
    assert index["weight_map"] == {
        "layer0.weight": names[0], "layer1.weight": names[0], "layer2.weight": names[1],
        "layer3.weight": names[1], "layer4.weight": names[2],
    }  # fmt: skip
    for name, tensor in state.items():
        assert torch.equal(load_file(str(tmp_path / index["weight_map"][name]))[name], tensor)
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_tensor_bigger_than_a_shard_travels_alone(tmp_path):
    state = {"small": torch.zeros(10), "big": torch.zeros(1000), "tail": torch.zeros(10)}
    names = save_safetensors(state, tmp_path, max_shard_bytes=100)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]
    assert [index[n] for n in state] == names


def test_one_shard_is_a_plain_model_file_marked_as_torch(tmp_path):
    state = numbered(2)
    assert save_safetensors(state, tmp_path) == ["model.safetensors"]
    assert not (tmp_path / "model.safetensors.index.json").exists()
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}  # transformers refuses files without it
    loaded = load_file(str(tmp_path / "model.safetensors"))
    assert all(torch.equal(loaded[n], t) for n, t in state.items())


def test_views_tied_weights_and_sharded_tensors_are_written_whole(tmp_path):
    base = torch.arange(12.0).reshape(3, 4)

    class Sharded:
        """Stands in for a DTensor: only full_tensor() gives the whole value."""

        def full_tensor(self):
            return base * 10

    state = {"embed": base, "head": base, "column": base[:, 1], "sharded": Sharded()}
    save_safetensors(state, tmp_path)
    loaded = load_file(str(tmp_path / "model.safetensors"))
    assert torch.equal(loaded["embed"], base) and torch.equal(loaded["head"], base)
    assert torch.equal(loaded["column"], torch.tensor([1.0, 5.0, 9.0]))
    assert torch.equal(loaded["sharded"], base * 10)


def test_three_names_of_one_tensor_are_all_written(tmp_path):
    """A weight tied in three places (embedding, output head, an alias) saves once per name:
    every name after the first gets its own copy, so no two saved tensors share storage."""
    base = torch.arange(6.0).reshape(2, 3)
    save_safetensors({"embed": base, "head": base, "alias": base}, tmp_path)
    loaded = load_file(str(tmp_path / "model.safetensors"))
    assert set(loaded) == {"embed", "head", "alias"} and all(torch.equal(t, base) for t in loaded.values())


def publish_in_thread(fn, *args) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - asserted by the test
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def test_an_adapter_is_published_in_the_peft_layout(tmp_path):
    sender = FilesystemWeights(FilesystemWeights.Config(timeout=10), tmp_path)
    consumer = FilesystemWeights(FilesystemWeights.Config(timeout=10), tmp_path)
    lora_a = torch.randn(2, 4)
    tensors = {"up.lora_A.weight": lora_a, "up.lora_B.weight": torch.zeros(8, 2), "tied": lora_a}
    thread, errors = publish_in_thread(sender.publish_adapter, tensors, {"r": 2, "lora_alpha": 4}, 1)
    path = consumer.receive(1, timeout=10)
    thread.join(10)
    assert not errors
    step = tmp_path / "broadcasts" / "step_1"
    assert path == str(step)
    assert sorted(p.name for p in step.iterdir() if not p.name.startswith(".")) == [
        "adapter_config.json", "adapter_model.safetensors",
    ]  # fmt: skip
    assert json.loads((step / "adapter_config.json").read_text()) == {"r": 2, "lora_alpha": 4}
    loaded = load_file(f"{path}/adapter_model.safetensors")
    assert set(loaded) == set(tensors) and torch.equal(loaded["tied"], lora_a)
    assert (step / ".finished").exists() and sender.latest_version() == 1


def test_an_adapter_replaces_what_an_earlier_attempt_left(tmp_path):
    sender = FilesystemWeights(FilesystemWeights.Config(timeout=10), tmp_path)
    stale = tmp_path / "broadcasts" / "step_3"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_text("from an earlier attempt")
    (stale / ".receiver_ready").write_text("0\n")
    thread, errors = publish_in_thread(sender.publish_adapter, {"a.lora_A.weight": torch.zeros(1, 2)}, {"r": 1}, 3)
    sender_ready = stale / ".sender_ready"
    while thread.is_alive() and not sender_ready.exists():
        time.sleep(0.01)
    assert not (stale / "model.safetensors").exists() and not (stale / ".finished").exists()
    (stale / ".receiver_ready").write_text("1\n")
    thread.join(10)
    assert not errors and (stale / ".finished").exists()


def test_the_consumer_budget_covers_both_waits(tmp_path):
    consumer = FilesystemWeights(FilesystemWeights.Config(timeout=10), tmp_path)
    step = tmp_path / "broadcasts" / "step_4"
    step.mkdir(parents=True)
    (step / ".sender_ready").write_text("1\n")
    with pytest.raises(TimeoutError, match=r"waited 0s for the trainer to finish weights version 4"):
        consumer.receive(4, timeout=0)


def test_retention_never_removes_a_version_newer_than_the_published_one(tmp_path):
    sender = FilesystemWeights(FilesystemWeights.Config(timeout=10), tmp_path)
    for step in (1, 2, 3, 9):
        (tmp_path / "broadcasts" / f"step_{step}").mkdir(parents=True)
    sender._prune(3)
    assert sorted(p.name for p in (tmp_path / "broadcasts").iterdir()) == ["step_2", "step_3", "step_9"]


def test_retention_that_cannot_remove_an_old_version_does_not_fail_the_publish(tmp_path):
    sender = FilesystemWeights(FilesystemWeights.Config(timeout=10), tmp_path)
    for step in (2, 3):
        (tmp_path / "broadcasts" / f"step_{step}").mkdir(parents=True)
    (tmp_path / "broadcasts" / "step_1").write_text("not a directory: rmtree fails on it")
    sender._prune(3)  # no error
    assert sorted(p.name for p in (tmp_path / "broadcasts").iterdir()) == ["step_1", "step_2", "step_3"]
