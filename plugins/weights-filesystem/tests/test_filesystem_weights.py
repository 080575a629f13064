"""Filesystem weight transport: handshake order, files, retention, timeouts, no torch on
the consumer side."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from prl_weights_filesystem.transport import FilesystemWeights, save_safetensors

torch = pytest.importorskip("torch")


def _pair(tmp_path, timeout=10.0):
    cfg = FilesystemWeights.Config(timeout=timeout)
    return FilesystemWeights(cfg, tmp_path), FilesystemWeights(cfg, tmp_path)


def _publish_in_thread(sender, state, version):
    errors = []

    def run():
        try:
            sender.publish(state, version)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t, errors


def test_handshake_delivers_loadable_safetensors(tmp_path):
    from safetensors.torch import load_file

    sender, consumer = _pair(tmp_path)
    emb = torch.randn(8, 4)
    state = {"embed.weight": emb, "lm_head.weight": emb, "norm.weight": torch.ones(4)}  # tied weights
    t, errors = _publish_in_thread(sender, state, 3)
    weight_dir = consumer.receive(3, timeout=10)
    t.join(10)
    assert not errors
    d = tmp_path / "broadcasts" / "step_3"
    assert weight_dir == str(d)
    markers = [d / m for m in (".sender_ready", ".receiver_ready", ".started", ".finished")]
    assert all(m.exists() for m in markers)
    stamps = [float(m.read_text()) for m in markers]
    assert stamps == sorted(stamps)  # the four stages happened in order
    loaded = load_file(str(d / "model.safetensors"))
    assert torch.equal(loaded["lm_head.weight"], emb) and set(loaded) == set(state)
    assert sender.latest_version() == 3


def test_keeps_the_two_newest_versions(tmp_path):
    sender, consumer = _pair(tmp_path)
    for v in range(4):
        t, errors = _publish_in_thread(sender, {"w": torch.full((2,), float(v))}, v)
        consumer.receive(v, timeout=10)
        t.join(10)
        assert not errors
    assert sorted(p.name for p in (tmp_path / "broadcasts").iterdir()) == ["step_2", "step_3"]


def test_sender_times_out_naming_the_consumer(tmp_path):
    sender, _ = _pair(tmp_path, timeout=0.3)
    with pytest.raises(TimeoutError, match=r"consumer to acknowledge weights version 1.*receiver_ready"):
        sender.publish({"w": torch.zeros(1)}, 1)


def test_consumer_times_out_naming_the_version(tmp_path):
    _, consumer = _pair(tmp_path)
    with pytest.raises(TimeoutError, match=r"trainer to publish weights version 5 .*step_5/.sender_ready"):
        consumer.receive(5, timeout=0.2)


def test_leftover_markers_of_an_earlier_attempt_are_cleared(tmp_path):
    sender, consumer = _pair(tmp_path, timeout=0.3)
    old = tmp_path / "broadcasts" / "step_2"
    old.mkdir(parents=True)
    for m in (".sender_ready", ".receiver_ready", ".started", ".finished"):
        (old / m).write_text("0\n")
    with pytest.raises(TimeoutError):  # the stale .receiver_ready does not count
        sender.publish({"w": torch.zeros(1)}, 2)
    assert not (old / ".finished").exists()


def test_shards_with_index(tmp_path):
    state = {f"layer{i}.weight": torch.zeros(256) for i in range(4)}  # 1 KiB each
    names = save_safetensors(state, tmp_path, max_shard_bytes=2048)
    assert names == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == 4096
    assert index["weight_map"]["layer3.weight"] == "model-00002-of-00002.safetensors"


def test_consumer_side_does_not_import_torch(tmp_path):
    code = (
        "import sys, threading, pathlib\n"
        "from prl_weights_filesystem.transport import FilesystemWeights\n"
        f"d = pathlib.Path({str(tmp_path)!r}) / 'broadcasts' / 'step_0'; d.mkdir(parents=True)\n"
        "(d / '.sender_ready').write_text('1'); (d / '.finished').write_text('2')\n"
        f"FilesystemWeights(FilesystemWeights.Config(), pathlib.Path({str(tmp_path)!r})).receive(0, 5)\n"
        "sys.exit('torch' in sys.modules or 'safetensors' in sys.modules)\n"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_registered_as_the_filesystem_transport():
    from prl.plugins import get_registry

    assert get_registry().get("weight_transports", "filesystem") is FilesystemWeights
