"""Counting the reads of tensor values into Python that prl's own code makes (a test helper).

On a GPU every such read (``.item()``, ``int()``, ``float()``, a truth test, ``.tolist()``)
waits until the device has finished all work queued before it, and so do calls whose result
has a size only the values decide (``nonzero``). Counted on the CPU, where nothing waits,
they show where a GPU run would: a count that grows with the rows or micro-batches of a step
is a wait per row. Reads made by torch or transformers themselves are not counted (their
CPU paths read values the GPU paths do not); the GPU tests under
``torch.cuda.set_sync_debug_mode("error")`` see those.

Test modules load this file by path: pytest runs in importlib mode, where a test directory
is not importable as a package.
"""

from __future__ import annotations

import contextlib
import os
import sys

import torch

READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "nonzero")


def prl_packages() -> tuple[str, ...]:
    """The directories of prl's imported packages (prl, prl_trainer_torch, prl_loss_ipo, ...),
    wherever they are installed. Matching directory names instead would also match torch
    when the checkout itself lives in a directory called prl."""
    dirs = set()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and (name == "prl" or name.startswith("prl_")) and "." not in name:
            dirs.add(os.path.dirname(path) + os.sep)
    return tuple(sorted(dirs))


def _counting(original, name: str, seen: list[str], packages: tuple[str, ...]):
    def read(*args, **kwargs):
        caller = sys._getframe(1)
        if caller.f_code.co_filename.startswith(packages):
            seen.append(f"{name} from {caller.f_code.co_filename}:{caller.f_lineno}")
        return original(*args, **kwargs)

    return read


@contextlib.contextmanager
def count_host_reads():
    """While active, every read of a tensor's value by prl code is listed (``"tolist from
    .../rl_step.py:396"``) in the list this yields."""
    seen: list[str] = []
    packages = prl_packages()
    originals = {name: getattr(torch.Tensor, name) for name in READS}
    function = torch.nonzero
    for name, fn in originals.items():
        setattr(torch.Tensor, name, _counting(fn, name, seen, packages))
    torch.nonzero = _counting(function, "torch.nonzero", seen, packages)
    try:
        yield seen
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)
        torch.nonzero = function
