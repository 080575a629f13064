"""Import heavy modules on first attribute access.

Plugin entry-point modules are imported whenever the registry loads (also by `prl rl
--dry-run` and on CPU-only orchestrator nodes), so modules that register classes but only
need torch inside methods bind ``torch = lazy_import("torch")`` instead of ``import torch``.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class _LazyModule(types.ModuleType):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_target"] = name

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self.__dict__["_target"])
        return getattr(module, attr)


def lazy_import(name: str) -> Any:
    """A stand-in for ``import name`` that imports the module on first use."""
    return _LazyModule(name)
