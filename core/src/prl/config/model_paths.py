"""Is a configured model there? Checked at resolve time, before any process starts.

A model name must be a local directory or a model already in the local Hugging Face cache.
prl never downloads at resolve time (a dry run downloads nothing), so a name that is
neither would only fail later, deep inside transformers, with a long traceback; here it is
one line naming the field. Nothing is imported from transformers or huggingface_hub: the
cache layout (``<cache>/models--<org>--<name>/snapshots/<rev>/``) is read directly.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from prl.config.errors import ConfigError


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache directory, found the way huggingface_hub finds it."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(xdg).expanduser() / "huggingface" / "hub"


def in_hf_cache(name: str) -> bool:
    """True when some revision of model ``name`` (``org/name`` or ``name``) is cached."""
    if not name or name.startswith(("/", ".")) or name.count("/") > 1:
        return False
    snapshots = hf_hub_cache() / ("models--" + name.replace("/", "--")) / "snapshots"
    try:
        return any((rev / "config.json").is_file() for rev in snapshots.iterdir())
    except OSError:
        return False


def model_available(name: str) -> bool:
    return Path(name).expanduser().is_dir() or in_hf_cache(name)


def check_models(fields: Iterable[tuple[str, str | None]]) -> None:
    """Raise a one-line ConfigError for the first ``(field path, model name)`` whose model is
    neither a local directory nor cached. A name is checked once, under its first field."""
    seen: set[str] = set()
    for field, name in fields:
        if not name or name in seen:
            continue
        seen.add(name)
        if not model_available(name):
            flag = "--" + field.replace("_", "-")
            raise ConfigError(
                f"{flag}: model '{name}' is neither a local directory nor in the Hugging Face cache "
                f"({hf_hub_cache()}); create one with `prl model init <dir>` or download it first"
            )


def models_of(cfg: object, merged: dict) -> list[tuple[str, str | None]]:
    """``(field path, name)`` of every model and tokenizer a resolved root config loads:
    its own and those of its trainer, orchestrator and inference sections. A shared
    ``model.name`` the user gave comes first, so an error names the field they wrote."""
    out: list[tuple[str, str | None]] = []
    shared = merged.get("model") if isinstance(merged, dict) else None
    if isinstance(shared, dict) and isinstance(shared.get("name"), str):
        out.append(("model.name", shared["name"]))
    for prefix in ("", "trainer.", "orchestrator.", "inference."):
        comp = getattr(cfg, prefix[:-1], None) if prefix else cfg
        model, tokenizer = getattr(comp, "model", None), getattr(comp, "tokenizer", None)
        if isinstance(getattr(model, "name", None), str):
            out.append((f"{prefix}model.name", model.name))
        if isinstance(getattr(tokenizer, "name", None), str):
            out.append((f"{prefix}tokenizer.name", tokenizer.name))
    return out


def check_renderers(cfg: object) -> None:
    """Ask every renderer a resolved root config builds (its own ``renderer`` and its
    orchestrator's) whether it can serve the model it will be given, so an ``auto``
    renderer with an unmapped model fails before launch, as one line naming the flag."""
    for prefix in ("", "orchestrator."):
        comp = getattr(cfg, prefix[:-1], None) if prefix else cfg
        renderer = getattr(comp, "renderer", None)
        check = getattr(renderer, "check", None)
        if check is None:
            continue
        tokenizer = getattr(getattr(comp, "tokenizer", None), "name", None)
        model = tokenizer or getattr(getattr(comp, "model", None), "name", None)
        if not isinstance(model, str):
            continue
        try:
            check(model)
        except ValueError as exc:
            raise ConfigError(f"--{prefix}renderer.name: {exc}") from None
