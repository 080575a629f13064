"""The plugin manager: loads the ``prl`` entry points once and keys each class by its tag.

Environment switches:
    ``PRL_DISABLE_PLUGINS``: comma-separated entry-point or distribution names to skip.
    ``PRL_LOAD_PLUGINS``: when set, an allow-list; only these entry points load.
    ``PRL_TRACE_PLUGINS``: print every hook call (pluggy hook-call monitoring).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Generic, TypeVar

import pluggy

from prl import contracts, hookspecs
from prl.config.base import rebuild_configs
from prl.known_plugins import install_hint


class PluginError(Exception):
    """A plugin could not be loaded or two plugins claim one tag."""


T = TypeVar("T")


@dataclass(frozen=True)
class Kind(Generic[T]):
    """One plugin kind: its register hook, the ClassVar holding a class's tag, and the
    contract every registered class must subclass."""

    name: str
    hook: str
    tag_attr: str
    label: str
    base: type[T]


ALGORITHMS = Kind("algorithms", "prl_register_algorithms", "type", "algorithm", contracts.Algorithm)
LOSSES = Kind("losses", "prl_register_losses", "type", "loss", contracts.Loss)
RENDERERS = Kind("renderers", "prl_register_renderers", "name", "renderer", contracts.Renderer)
MONITORS = Kind("monitors", "prl_register_monitors", "key", "monitor", contracts.Monitor)
WEIGHT_TRANSPORTS = Kind(
    "weight_transports", "prl_register_weight_transports", "type", "weight transport", contracts.WeightTransport
)
LAUNCHERS = Kind("launchers", "prl_register_launchers", "type", "launcher", contracts.Launcher)
INFERENCE_BACKENDS = Kind(
    "inference_backends",
    "prl_register_inference_backends",
    "type",
    "inference backend",
    contracts.InferenceBackend,
)
TASKSETS = Kind("tasksets", "prl_register_tasksets", "id", "taskset", contracts.Taskset)
TRAINERS = Kind("trainers", "prl_register_trainers", "type", "trainer", contracts.Trainer)

KINDS: dict[str, Kind[Any]] = {
    k.name: k
    for k in (
        ALGORITHMS,
        LOSSES,
        RENDERERS,
        MONITORS,
        WEIGHT_TRANSPORTS,
        LAUNCHERS,
        INFERENCE_BACKENDS,
        TASKSETS,
        TRAINERS,
    )
}


def _kind(kind: Kind[T] | str) -> Kind[T]:
    return kind if isinstance(kind, Kind) else KINDS[kind]


@dataclass
class LoadedPlugin:
    """One registered plugin module and the distribution it came from."""

    name: str
    dist: str
    version: str
    registers: dict[str, list[str]] = field(default_factory=dict)


class Registry:
    """Installed plugin classes, keyed by kind then tag, and where each came from."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self.plugins: dict[str, LoadedPlugin] = {}
        self._classes: dict[str, dict[str, type]] = {}
        self._origin: dict[tuple[str, str], str] = {}

    def add(self, module: Any, name: str, dist: str, version: str) -> None:
        self.pm.register(module, name=name)
        self.plugins[name] = LoadedPlugin(name, dist, version)
        self._classes.clear()

    def classes(self, kind: Kind[T] | str) -> dict[str, type[T]]:
        """The classes registered for ``kind``, keyed by tag; a duplicate tag raises."""
        spec = _kind(kind)
        if spec.name not in self._classes:
            self._classes[spec.name] = self._collect(spec)
        return self._classes[spec.name]

    def get(self, kind: Kind[T] | str, tag: str) -> type[T]:
        """The class registered for ``tag``; a missing tag raises naming what to install."""
        spec = _kind(kind)
        found = self.classes(spec)
        if tag not in found:
            raise PluginError(f"no {spec.label} '{tag}' is installed{install_hint(spec.name, tag)}")
        return found[tag]

    def default_tag(self, kind: Kind[Any] | str) -> str | None:
        """The tag of the installed class that declares itself its kind's default
        (``is_default = True``), or None; two defaults of one kind are an error."""
        spec = _kind(kind)
        defaults = [tag for tag, cls in self.classes(spec).items() if getattr(cls, "is_default", False)]
        if len(defaults) > 1:
            dists = " and ".join(f"'{self.origin(spec, t)}' ({t})" for t in defaults)
            raise PluginError(
                f"{spec.label}: {dists} both declare themselves the default; "
                "uninstall one or disable it with PRL_DISABLE_PLUGINS"
            )
        return defaults[0] if defaults else None

    def origin(self, kind: Kind[Any] | str, tag: str) -> str:
        spec = _kind(kind)
        self.classes(spec)
        return self._origin.get((spec.name, tag), "?")

    def _collect(self, spec: Kind[T]) -> dict[str, type[T]]:
        out: dict[str, type[T]] = {}
        for impl in getattr(self.pm.hook, spec.hook).get_hookimpls():
            plugin = self.plugins.get(impl.plugin_name)
            dist = plugin.dist if plugin else impl.plugin_name
            for cls in impl.function() or []:
                tag = getattr(cls, spec.tag_attr, None)
                if not isinstance(tag, str) or not tag:
                    raise PluginError(f"{dist}: {cls.__qualname__} has no '{spec.tag_attr}' tag")
                if not (isinstance(cls, type) and issubclass(cls, spec.base)):
                    raise PluginError(
                        f"{dist}: {cls!r} is registered as a {spec.label} but does not subclass "
                        f"{spec.base.__module__}.{spec.base.__qualname__}"
                    )
                if tag in out:
                    other = self._origin[(spec.name, tag)]
                    raise PluginError(
                        f"{spec.label} {spec.tag_attr} '{tag}' is claimed by both "
                        f"'{other}' and '{dist}'; uninstall one or disable it with PRL_DISABLE_PLUGINS"
                    )
                out[tag] = cls
                self._origin[(spec.name, tag)] = dist
                if plugin:
                    plugin.registers.setdefault(spec.name, []).append(tag)
        return out

    def describe(self) -> list[LoadedPlugin]:
        for kind in KINDS:
            self.classes(kind)
        return sorted(self.plugins.values(), key=lambda p: p.dist)


_REGISTRY: Registry | None = None


def _csv_env(name: str) -> set[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return {part.strip() for part in raw.split(",") if part.strip()}


def _load(pm: pluggy.PluginManager) -> Registry:
    registry = Registry(pm)
    disabled = _csv_env("PRL_DISABLE_PLUGINS") or set()
    allowed = _csv_env("PRL_LOAD_PLUGINS")
    for ep in sorted(metadata.entry_points(group="prl"), key=lambda e: e.name):
        dist = ep.dist.name if ep.dist else ep.name
        if ep.name in disabled or dist in disabled:
            continue
        if allowed is not None and ep.name not in allowed and dist not in allowed:
            continue
        if pm.has_plugin(ep.name):
            continue
        try:
            module = ep.load()
        except Exception as exc:  # a broken plugin must not take the CLI down with it
            print(f"prl: plugin '{ep.name}' ({dist}) failed to import: {exc}", file=sys.stderr)
            continue
        registry.add(module, ep.name, dist, ep.dist.version if ep.dist else "?")
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:  # a plugin implements a hook that does not exist
        raise PluginError(f"plugin '{exc.plugin_name}' has an unknown hook: {exc}") from None
    if os.environ.get("PRL_TRACE_PLUGINS"):
        pm.trace.root.setwriter(lambda msg: print(msg, end="", file=sys.stderr))
        pm.enable_tracing()
    return registry


def get_registry() -> Registry:
    """The process-wide registry, loading entry points on first use."""
    global _REGISTRY
    if _REGISTRY is None:
        pm = pluggy.PluginManager("prl")
        pm.add_hookspecs(hookspecs)
        _REGISTRY = _load(pm)
    return _REGISTRY


def reset_registry() -> None:
    """Forget loaded plugins (tests), and recompose the config unions on next use."""
    global _REGISTRY
    _REGISTRY = None
    rebuild_configs()


def register_inline(module: Any, name: str, dist: str = "inline") -> None:
    """Register a module or object as a plugin at runtime (tests and notebooks)."""
    registry = get_registry()
    registry.add(module, name, dist, "0")
    try:
        rebuild_configs()
    except PluginError:
        pass  # e.g. a duplicate tag: reported by the next registry lookup or validation


def unregister_inline(*names: str) -> None:
    """Undo :func:`register_inline` for every name, then recompose the configs once.

    All of them go before the rebuild: rebuilding between two removals can meet the
    plugins still registered in conflict (two declared defaults) and fail, which would
    leave the rest registered for whatever runs next in the process."""
    registry = get_registry()
    for name in names:
        if registry.pm.has_plugin(name):
            registry.pm.unregister(name=name)
        registry.plugins.pop(name, None)
    registry._classes.clear()
    rebuild_configs()
