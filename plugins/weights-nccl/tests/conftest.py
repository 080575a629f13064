from __future__ import annotations

import threading

import pytest
import torch
import torch.distributed as dist


def _members(*targets, wait: float = 60.0) -> list:
    """Run each target in its own thread (a group member with its own store client and
    process group); return what each returned or raised, in order. Threads, not
    processes, so the members run the code under test in this interpreter."""
    results: list = [None] * len(targets)

    def wrap(i, fn):
        try:
            results[i] = fn()
        except BaseException as exc:  # noqa: BLE001 - compared by the test
            results[i] = exc

    threads = [threading.Thread(target=wrap, args=(i, fn), daemon=True) for i, fn in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(wait)
    return results


@pytest.fixture
def members():
    return _members


class FakeNCCL:
    """Stands in for ``dist.ProcessGroupNCCL`` where torch has no CUDA: records how the
    group was built (``fail`` makes construction raise, as a broken NCCL init does)."""

    fail: BaseException | None = None

    class Options:
        def __init__(self) -> None:
            self._timeout = None

    def __init__(self, store, rank, world, opts) -> None:
        if FakeNCCL.fail is not None:
            raise FakeNCCL.fail
        self.store, self.rank, self.world, self.opts = store, rank, world, opts


@pytest.fixture
def gpu_machine(monkeypatch):
    """A machine that looks like it has GPUs (the current one is cuda:1) and NCCL."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(dist, "ProcessGroupNCCL", FakeNCCL, raising=False)
    monkeypatch.setattr(FakeNCCL, "fail", None)
    return FakeNCCL
