"""Filesystem weight transport: HF safetensors in ``broadcasts/step_N`` plus a handshake.

Trainer side (:meth:`FilesystemWeights.publish`, imports torch and safetensors lazily):

1. remove a leftover ``step_N`` (a previous attempt's markers must not be mistaken for a
   fresh handshake), save the weights, write ``.sender_ready``;
2. wait up to ``timeout`` s for the consumer's ``.receiver_ready``;
3. write ``.started``, then ``.finished`` (the files are already in place);
4. keep only the two newest ``step_*`` directories.

LoRA runs publish an adapter instead (:meth:`FilesystemWeights.publish_adapter`):
``adapter_model.safetensors`` and ``adapter_config.json`` (PEFT layout), same handshake.

Consumer side (:meth:`FilesystemWeights.receive`, torch-free): wait for ``.sender_ready``,
write ``.receiver_ready``, wait for ``.finished``, return the directory.

Large models are split into shards of at most ``MAX_SHARD_BYTES`` with the standard
``model.safetensors.index.json`` (``{"metadata": {"total_size"}, "weight_map"}``).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

from prl import layout
from prl.contracts import WeightTransport, WeightTransportConfig
from prl.handshake import FINISHED, RECEIVER, SENDER, STARTED, latest_finished, steps
from prl.handshake import touch as _touch
from prl.handshake import wait as _wait

MAX_SHARD_BYTES = 5 * 1024**3
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
KEEP = 2


class FilesystemWeights(WeightTransport):
    """Weights as safetensors files in ``<run_dir>/broadcasts/step_N`` (see module docstring)."""

    type: ClassVar[str] = "filesystem"
    is_default: ClassVar[bool] = True

    class Config(WeightTransportConfig):
        carries_adapters: ClassVar[bool] = True

        type: Literal["filesystem"] = "filesystem"
        """Selects this transport."""

    @property
    def base(self) -> Path:
        return self.run_dir / "broadcasts"

    def step_dir(self, version: int) -> Path:
        return layout.step_dir(self.base, version)

    @property
    def timeout(self) -> float:
        return self.config.timeout

    # ---- trainer side ---------------------------------------------------------------
    def publish(self, state_dict: dict[str, Any], version: int) -> None:
        target = self.step_dir(version)
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        save_safetensors(state_dict, target)
        self._hand_over(target, version)

    def publish_adapter(self, tensors: dict[str, Any], adapter_config: dict[str, Any], version: int) -> None:
        """A LoRA adapter in the PEFT layout: ``adapter_model.safetensors`` and
        ``adapter_config.json`` in ``broadcasts/step_N``, then the same handshake."""
        from safetensors.torch import save_file

        target = self.step_dir(version)
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        _save_atomic(save_file, _plain_tensors(tensors), target / ADAPTER_WEIGHTS)
        (target / ADAPTER_CONFIG).write_text(json.dumps(adapter_config, indent=2))
        self._hand_over(target, version)

    def _hand_over(self, target: Path, version: int) -> None:
        _touch(target / SENDER)
        what = f"a consumer to acknowledge weights version {version}; is the orchestrator running?"
        _wait(target / RECEIVER, self.timeout, what)
        _touch(target / STARTED)
        _touch(target / FINISHED)
        self._prune(version)

    def _prune(self, newest: int) -> None:
        keep = [s for s in steps(self.base) if s <= newest][-KEEP:]
        for step in steps(self.base):
            if step not in keep and step < newest:
                shutil.rmtree(self.step_dir(step), ignore_errors=True)

    # ---- consumer side (torch-free) ---------------------------------------------------
    def receive(self, version: int, timeout: float, load: bool = True) -> str | None:
        target = self.step_dir(version)
        deadline = time.monotonic() + timeout
        _wait(target / SENDER, timeout, f"the trainer to publish weights version {version}")
        _touch(target / RECEIVER)
        left = max(0.0, deadline - time.monotonic())
        _wait(target / FINISHED, left, f"the trainer to finish weights version {version}")
        return str(target)

    def latest_version(self) -> int | None:
        return latest_finished(self.base)


def save_safetensors(state_dict: dict[str, Any], target: Path, max_shard_bytes: int = MAX_SHARD_BYTES) -> list[str]:
    """Write ``state_dict`` as HF safetensors into ``target``; returns the file names."""
    from safetensors.torch import save_file

    tensors = _plain_tensors(state_dict)
    shards: list[dict[str, Any]] = [{}]
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    if len(shards) == 1:
        _save_atomic(save_file, shards[0], target / "model.safetensors")
        return ["model.safetensors"]
    names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    weight_map = {}
    for name, shard in zip(names, shards, strict=False):
        _save_atomic(save_file, shard, target / name)
        weight_map.update(dict.fromkeys(shard, name))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (target / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return names


def _plain_tensors(state_dict: dict[str, Any]) -> dict[str, Any]:
    """Detached, contiguous CPU tensors; tensors sharing storage (tied weights) are cloned
    because safetensors refuses shared storage."""
    seen: set[int] = set()
    out = {}
    for name, tensor in state_dict.items():
        full = getattr(tensor, "full_tensor", None)  # a DTensor: gather it first
        t = (full() if callable(full) else tensor).detach().cpu().contiguous()
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            t = t.clone()
        seen.add(ptr)
        out[name] = t
    return out


def _save_atomic(save_file, tensors: dict[str, Any], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, path)
