"""``[inference.vllm]``: vLLM's own argument names, as the reference spells the section.

Each key is a vLLM server argument (``vllm serve --help``), snake- or kebab-case. It lands
where prl keeps that setting, so it overrides what prl would otherwise build:

* names prl sets from its own sections go there (``model`` -> ``model.name``, ``port`` ->
  ``server.port``, ...), so cross-component checks still see them;
* names ``[inference.backend]`` types (``max_num_seqs``, ``enforce_eager``, ...) become those
  fields and are validated as such;
* any other name goes to ``extra_args`` and reaches vLLM's parser unchanged.

Unknown names fail at resolve time. The known names are read from vLLM's source with
``ast`` (``EngineArgs``, ``AsyncEngineArgs`` and the OpenAI server's ``FrontendArgs``
dataclasses, plus the flags its parser adds by hand): importing vLLM would pull in torch
and take seconds. Without vLLM installed (an orchestrator node) nothing is checked here and
the server reports a bad name when it starts.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
from pathlib import Path
from typing import Any

# vLLM name -> path in the [inference] table where prl keeps it.
PRL_OWNED: dict[str, tuple[str, ...]] = {
    "model": ("model", "name"),
    "host": ("server", "host"),
    "port": ("server", "port"),
    "api_key": ("server", "api_key"),
    "tokenizer": ("tokenizer", "name"),
    "chat_template": ("tokenizer", "chat_template"),
    "trust_remote_code": ("tokenizer", "trust_remote_code"),
    "max_model_len": ("max_model_len",),
    "seed": ("seed",),
}
# vLLM names the backend sets itself and a user may not change.
FIXED = {
    "served_model_name": "clients address the model by model.name",
    "worker_extension_cls": "the backend installs its weight-reload extension",
    "uds": "the server listens on server.host/port",
    "headless": "not supported",
    "api_server_count": "one API process serves the admin routes",
    "model_tag": "use model",
}
_ENGINE_CLASSES = {"EngineArgs", "AsyncEngineArgs"}
_FRONTEND_CLASSES = {"BaseFrontendArgs", "FrontendArgs"}


def snake(key: str) -> str:
    return str(key).strip().lstrip("-").replace("-", "_")


def absorb_vllm_section(section: dict[str, Any], inference: dict[str, Any], typed: set[str]) -> dict[str, Any]:
    """Fold ``[inference.vllm]`` into the raw ``[inference]`` table (see the module doc);
    ``typed`` are the vLLM names ``[inference.backend]`` has typed fields for."""
    out = dict(inference)
    backend = dict(out["backend"])
    extra = dict(backend.get("extra_args") or {})
    for key, value in section.items():
        name = snake(key)
        if name in FIXED:
            raise ValueError(f"inference.vllm.{name} cannot be set: {FIXED[name]}")
        check_vllm_name(name, "inference.vllm")
        if name in PRL_OWNED:
            _set(out, PRL_OWNED[name], value)
        elif name in typed:
            backend[name] = value
        else:
            extra = {k: v for k, v in extra.items() if snake(k) != name}
            extra[name] = value
    if extra:
        backend["extra_args"] = extra
    out["backend"] = backend
    return out


def check_vllm_name(name: str, where: str) -> None:
    """Raise ValueError when vLLM is installed and has no argument ``name``."""
    known = known_vllm_args()
    if known is None or name in known:
        return
    near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    hint = f" (did you mean {near[0]}?)" if near else ""
    raise ValueError(f"{where}.{name} is not a vLLM engine or server argument{hint}")


def _set(table: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = table
    for part in path[:-1]:
        child = node.get(part)
        node[part] = child = dict(child) if isinstance(child, dict) else {}
        node = child
    node[path[-1]] = value


@functools.cache
def known_vllm_args() -> frozenset[str] | None:
    """Every argument name of vLLM's OpenAI server, or None when it cannot be read."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    engine = _names(root / "engine" / "arg_utils.py", _ENGINE_CLASSES)
    frontend: set[str] = set()
    for path in sorted((root / "entrypoints").rglob("cli_args.py")):
        frontend |= _names(path, _FRONTEND_CLASSES)
    # A vLLM whose layout we do not recognise is not checked rather than wrongly rejected.
    if not engine or not frontend:
        return None
    return frozenset(engine | frontend)


def _names(path: Path, classes: set[str]) -> set[str]:
    """Fields of the named dataclasses in ``path`` plus every ``add_argument("--x")`` flag."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    found_class = False
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in classes:
            found_class = True
            names |= {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                    names.add(snake(arg.value))
    return names if found_class else set()
