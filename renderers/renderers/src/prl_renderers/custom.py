"""``custom``: a renderer class named by ``import_path``.

``import_path`` is ``"pkg.mod.Class"`` or ``"path/to/file.py:Class"``; a relative file path is
made absolute against the directory the config is loaded in (the launch directory), so the
resolved config works from any process. The class is either

* a prl :class:`~prl.contracts.Renderer` subclass, built as ``Class(cfg, tokenizer)`` where
  ``cfg`` is its ``config_class`` (or nested ``Config``) validated from the other keys of
  ``[renderer]``; or
* a ``renderers``-package style class with a ``config_class`` deriving from the package's
  ``BaseRendererConfig``, built as ``Class(tokenizer_object, cfg)`` and wrapped like the
  built-in families.

The class is imported and the keys validated when the config is loaded, so a bad path or a
bad key is a one-line configuration error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, field_validator, model_validator

from prl.contracts import Renderer, RendererConfig
from prl_renderers.delegate import DelegatingRenderer
from prl_renderers.families import PackageRenderer, _first_error
from prl_renderers.tokenizer import RendererError


def _is_file_ref(path: str) -> bool:
    return ":" in path or path.endswith(".py") or "/" in path


def load_class(import_path: str) -> type:
    """The class ``import_path`` names; RendererError (one line) when it cannot be loaded."""
    from renderers.custom import load_target

    where = f"renderer 'custom': import_path {import_path!r}"
    try:
        target = load_target(import_path)
    except ModuleNotFoundError as exc:
        raise RendererError(f"{where}: module {exc.name!r} not found") from None
    except (FileNotFoundError, ValueError, ImportError) as exc:
        raise RendererError(f"{where}: {str(exc).splitlines()[0]}") from None
    except Exception as exc:  # the user's module raised while importing
        raise RendererError(f"{where}: importing it raised {type(exc).__name__}: {exc}") from None
    if not isinstance(target, type):
        raise RendererError(f"{where} names {type(target).__name__}, not a class")
    return target


def config_class_of(cls: type) -> type:
    """The class's own config class; RendererError when it declares none usable."""
    from renderers.configs import BaseRendererConfig

    cfg = getattr(cls, "config_class", None)
    if cfg is None and issubclass(cls, Renderer):
        cfg = cls.__dict__.get("Config")
    ok = isinstance(cfg, type) and (issubclass(cfg, RendererConfig) or issubclass(cfg, BaseRendererConfig))
    if not ok:
        raise RendererError(
            f"renderer 'custom': {cls.__qualname__} must set config_class to a RendererConfig "
            "(or renderers BaseRendererConfig) subclass"
        )
    return cfg


def own_config(config: RendererConfig) -> Any:
    """The custom class's config, validated from the keys next to ``import_path``."""
    cfg_cls = config_class_of(load_class(config.import_path))
    data = dict(config.model_extra or {})
    if "name" in getattr(cfg_cls, "model_fields", {}):
        default = cfg_cls.model_fields["name"].default
        if isinstance(default, str):
            data.setdefault("name", default)
    try:
        return cfg_cls.model_validate(data)
    except Exception as exc:
        raise RendererError(f"renderer 'custom' ({config.import_path}): {_first_error(exc)}") from None


class CustomRenderer(DelegatingRenderer):
    """Builds the renderer named by ``import_path`` and delegates to it."""

    name: ClassVar[str] = "custom"

    class Config(RendererConfig):
        """``[renderer] name = "custom"``; the other keys are the custom class's config."""

        model_config = ConfigDict(extra="allow")

        name: Literal["custom"] = "custom"
        """Selects a user-supplied renderer class."""

        import_path: str
        """'pkg.mod.Class' or 'path/to/file.py:Class' (relative paths from the launch directory)."""

        @field_validator("import_path")
        @classmethod
        def _absolute(cls, value: str) -> str:
            if not value.strip():
                raise ValueError("must name a class, e.g. 'pkg.mod.Class' or 'file.py:Class'")
            module_ref, sep, attr = value.rpartition(":")
            if sep and _is_file_ref(module_ref):
                return f"{Path(module_ref).expanduser().absolute()}:{attr}"
            return value

        @model_validator(mode="after")
        def _loads(self):
            own_config(self)
            return self

    def __init__(self, config: RendererConfig, tokenizer: Any) -> None:
        target = load_class(config.import_path)
        cfg = own_config(config)
        if issubclass(target, Renderer):
            self.inner: Renderer = target(cfg, tokenizer)
        else:
            self.inner = _package_style(target, cfg, tokenizer)
        super().__init__(config, self.inner.tokenizer_path)
        self.tokenizer = getattr(self.inner, "tokenizer", None)


def _package_style(target: type, cfg: Any, tokenizer: Any) -> PackageRenderer:
    """Wrap a ``renderers``-package style class in the same adapter as the families."""

    class _Wrapped(PackageRenderer):
        name: ClassVar[str] = "custom"

        def __init__(self, tok: Any) -> None:
            self._package_config = cfg
            super().__init__(RendererConfig(), tok)

        def _build(self, tok: Any) -> Any:
            try:
                return target(tok, self._package_config)
            except Exception as exc:
                call = f"{target.__qualname__}(tokenizer, config)"
                raise RendererError(f"renderer 'custom': {call} raised: {exc}") from None

    return _Wrapped(tokenizer)
