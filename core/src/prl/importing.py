"""Resolve an ``import_path`` to a callable: the one way a setting names user code
(the custom loss, echo's filter), so plugins share it through core.

Accepted forms:
    ``pkg.mod.fn`` or ``pkg.mod:fn``   a function in an importable module
    ``path/to/file.py:fn``            a function in a Python file (relative paths are taken
                                      from the current directory)
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def check_import_path(value: str) -> str:
    """Validate the shape of ``value`` without importing anything."""
    module, _, name = _split(value)
    if not module or not name or not name.isidentifier():
        raise ValueError(f"import_path '{value}' must look like 'pkg.mod.fn', 'pkg.mod:fn' or 'path/file.py:fn'")
    return value


def load_callable(value: str) -> Callable[..., Any]:
    """Import the object named by ``value``; errors name the import_path."""
    module_name, is_file, name = _split(value)
    try:
        module = _load_file(module_name) if is_file else importlib.import_module(module_name)
    except FileNotFoundError:
        raise ValueError(f"import_path '{value}': file '{module_name}' does not exist") from None
    except ImportError as exc:
        raise ValueError(f"import_path '{value}': cannot import '{module_name}': {exc}") from exc
    obj = getattr(module, name, None)
    if obj is None:
        raise ValueError(f"import_path '{value}': '{module_name}' has no attribute '{name}'")
    if not callable(obj):
        raise ValueError(f"import_path '{value}': '{name}' is not callable")
    return obj


def _split(value: str) -> tuple[str, bool, str]:
    """(module or file, is_file, attribute)."""
    if ":" in value:
        left, _, name = value.rpartition(":")
        return left, left.endswith(".py"), name
    module, _, name = value.rpartition(".")
    return module, False, name


def _load_file(path: str) -> Any:
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise FileNotFoundError(path)
    # A stable, unique module name per file: two custom files both named loss.py must not
    # replace each other in sys.modules (pickling and tracebacks need a registered module).
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:10]
    name = f"prl_custom_{file.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"not a Python file: {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
