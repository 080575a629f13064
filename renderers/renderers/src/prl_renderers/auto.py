"""``auto``: pick the renderer for a model from its files or its name.

Resolution, first hit wins:

1. a ``"prl_renderer": "<name>"`` entry in the model directory's ``tokenizer_config.json``
   or ``config.json`` (``prl model init`` writes ``"qwen3"``), naming any installed prl
   renderer;
2. the ``renderers`` package's model map (exact Hugging Face ids such as
   ``Qwen/Qwen3-8B``), tried on the path as given, on its last two path components
   (``.../Qwen/Qwen3-8B``), on a hub cache folder (``models--Qwen--Qwen3-8B``), and on
   ``_name_or_path`` in ``config.json``.

A hub id that is not a local directory is read from its snapshots in the Hugging Face
cache, if any (nothing is downloaded).

No hit is a configuration error: a model whose chat template differs from its base model's
must not be guessed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from prl.contracts import Renderer, RendererConfig
from prl_renderers.delegate import DelegatingRenderer
from prl_renderers.tokenizer import RendererError, read_json, resolve_tokenizer

MARKER = "prl_renderer"


def _candidate_names(path: str) -> list[str]:
    names = [path]
    parts = Path(path).parts
    if len(parts) >= 2:
        names.append("/".join(parts[-2:]))
    for part in parts:
        hub = re.fullmatch(r"models--([^/]+?)--(.+)", part)
        if hub:
            names.append(f"{hub.group(1)}/{hub.group(2)}")
    named = read_json(path, "config.json").get("_name_or_path")
    if isinstance(named, str):
        names.append(named)
    return names


def _local_dirs(path: str) -> list[str]:
    """``path`` itself, and for a hub id that is not a local directory its cached snapshots
    (read in place: nothing is downloaded)."""
    if Path(path).expanduser().is_dir() or path.count("/") > 1 or path.startswith(("/", ".")):
        return [path]
    from prl.hub import hf_hub_cache

    snapshots = hf_hub_cache() / ("models--" + path.replace("/", "--")) / "snapshots"
    try:
        return [path, *(str(p) for p in sorted(snapshots.iterdir()))]
    except OSError:
        return [path]


def resolve_name(path: str) -> str:
    """The renderer name for the model or tokenizer at ``path``; RendererError if unmapped."""
    for directory in _local_dirs(path):
        for file in ("tokenizer_config.json", "config.json"):
            marker = read_json(directory, file).get(MARKER)
            if isinstance(marker, str) and marker:
                return marker
    from renderers.base import MODEL_RENDERER_MAP

    for name in _candidate_names(path):
        if name in MODEL_RENDERER_MAP:
            return MODEL_RENDERER_MAP[name]
    raise RendererError(
        f"renderer 'auto': no renderer is mapped for model {path!r}; set [renderer] name to a family "
        f"(e.g. 'qwen3') or 'default', or add \"{MARKER}\" to its tokenizer_config.json"
    )


class AutoRenderer(DelegatingRenderer):
    """Delegates to the renderer that :func:`resolve_name` picks for the tokenizer."""

    name: ClassVar[str] = "auto"
    is_default: ClassVar[bool] = True

    class Config(RendererConfig):
        """``[renderer] name = "auto"`` (the default): the renderer is chosen from the model."""

        name: Literal["auto"] = "auto"
        """Selects the renderer mapped to the model (see prl_renderers.auto)."""

        thinking_retention: Literal["tool_cycle", "all"] | None = None
        """Passed to the chosen renderer when set: how much past reasoning stays in context when bridging turns."""

        def check(self, model: str) -> None:
            """An unmapped model, or one mapped to a renderer that is not installed, is a
            configuration error before the run starts."""
            from prl.plugins import PluginError, get_registry

            name = resolve_name(model)
            try:
                get_registry().get("renderers", name)
            except PluginError as exc:
                raise RendererError(f"renderer 'auto' mapped {model!r} to '{name}': {exc}") from None

    def __init__(self, config: RendererConfig, tokenizer: Any) -> None:
        from prl.plugins import get_registry

        if isinstance(tokenizer, (str, Path)):
            path = str(tokenizer)
        else:
            path = str(getattr(tokenizer, "name_or_path", "") or "")
        super().__init__(config, path)
        self.resolved = resolve_name(path)
        if self.resolved == "auto":
            raise RendererError(f"renderer 'auto': {MARKER} of {path!r} must name a renderer, not 'auto'")
        try:
            cls = get_registry().get("renderers", self.resolved)
        except Exception as exc:
            raise RendererError(f"renderer 'auto' mapped {path!r} to '{self.resolved}': {exc}") from None
        extra = {}
        if config.thinking_retention is not None:
            extra["thinking_retention"] = config.thinking_retention
        try:
            inner_cfg = cls.Config(name=self.resolved, **extra)
        except Exception as exc:
            raise RendererError(f"renderer 'auto': '{self.resolved}' does not take thinking_retention: {exc}") from None
        self.inner: Renderer = inner_cfg.build(tokenizer=tokenizer if not isinstance(tokenizer, Path) else path)
        inner_tok = getattr(self.inner, "tokenizer", None)
        self.tokenizer = inner_tok if inner_tok is not None else resolve_tokenizer(tokenizer)[0]
