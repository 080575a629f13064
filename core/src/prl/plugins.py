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
from typing import Any

import pluggy

from prl import hookspecs


class PluginError(Exception):
    """A plugin could not be loaded or two plugins claim one tag."""


@dataclass(frozen=True)
class Kind:
    hook: str
    tag_attr: str
    label: str
    default: str | None = None


KINDS: dict[str, Kind] = {
    "algorithms": Kind("prl_register_algorithms", "type", "algorithm", "grpo"),
    "losses": Kind("prl_register_losses", "type", "loss", "ipo"),
    "renderers": Kind("prl_register_renderers", "name", "renderer", "auto"),
    "monitors": Kind("prl_register_monitors", "key", "monitor"),
    "weight_transports": Kind("prl_register_weight_transports", "type", "weight transport", "filesystem"),
    "launchers": Kind("prl_register_launchers", "type", "launcher", "local"),
    "inference_backends": Kind("prl_register_inference_backends", "type", "inference backend", "torch"),
    "tasksets": Kind("prl_register_tasksets", "id", "taskset"),
    "trainers": Kind("prl_register_trainers", "type", "trainer", "torch"),
}

# Which in-repo distribution provides a tag, so a config naming a missing plugin can say
# what to install. Third-party plugins are found through their entry points instead.
KNOWN_PROVIDERS: dict[tuple[str, Any], str] = {
    ("algorithms", "grpo"): "prl-algo-grpo",
    ("algorithms", "max_rl"): "prl-algo-max-rl",
    ("losses", "ipo"): "prl-loss-ipo",
    ("losses", "icepop"): "prl-loss-icepop",
    ("losses", "ppo"): "prl-loss-ppo",
    ("losses", "cispo"): "prl-loss-cispo",
    ("losses", "custom"): "prl-loss-custom",
    ("monitors", "file"): "prl-monitor-file",
    ("monitors", "console"): "prl-monitor-console",
    ("monitors", "wandb"): "prl-monitor-wandb",
    ("weight_transports", "filesystem"): "prl-weights-filesystem",
    ("launchers", "local"): "prl-launcher-local",
    ("launchers", "slurm"): "prl-launcher-slurm",
    ("inference_backends", "torch"): "prl-inference-torch",
    ("inference_backends", "vllm"): "prl-inference-vllm",
    ("trainers", "torch"): "prl-trainer-torch",
    ("renderers", "auto"): "prl-renderers",
    ("renderers", "default"): "prl-renderers",
    ("renderers", "custom"): "prl-renderers",
    ("tasksets", "reverse-text"): "prl-tasks-builtin",
    ("tasksets", "alphabet-sort"): "prl-tasks-builtin",
    ("tasksets", "kuhn-poker"): "prl-tasks-builtin",
    ("tasksets", "proposer-solver"): "prl-tasks-builtin",
}
KNOWN_FOLDERS: dict[str, str] = {
    "prl-algo-grpo": "algorithms/grpo",
    "prl-algo-max-rl": "algorithms/max-rl",
    "prl-loss-ipo": "algorithms/loss-ipo",
    "prl-loss-icepop": "algorithms/loss-icepop",
    "prl-loss-ppo": "algorithms/loss-ppo",
    "prl-loss-cispo": "algorithms/loss-cispo",
    "prl-loss-custom": "algorithms/loss-custom",
    "prl-monitor-file": "monitors/file",
    "prl-monitor-console": "monitors/console",
    "prl-monitor-wandb": "monitors/wandb",
    "prl-weights-filesystem": "plugins/weights-filesystem",
    "prl-launcher-local": "launchers/local",
    "prl-launcher-slurm": "launchers/slurm",
    "prl-inference-torch": "plugins/inference-torch",
    "prl-inference-vllm": "plugins/inference-vllm",
    "prl-trainer-torch": "plugins/trainer-torch",
    "prl-renderers": "renderers/renderers",
    "prl-tasks-builtin": "plugins/tasks-builtin",
}


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

    def classes(self, kind: str) -> dict[str, type]:
        """The classes registered for ``kind``, keyed by tag; a duplicate tag raises."""
        if kind not in self._classes:
            self._classes[kind] = self._collect(kind)
        return self._classes[kind]

    def get(self, kind: str, tag: str) -> type:
        found = self.classes(kind)
        if tag not in found:
            hint = KNOWN_PROVIDERS.get((kind, tag))
            extra = f"; install the distribution '{hint}'" if hint else ""
            raise PluginError(f"no {KINDS[kind].label} '{tag}' is installed{extra}")
        return found[tag]

    def origin(self, kind: str, tag: str) -> str:
        self.classes(kind)
        return self._origin.get((kind, tag), "?")

    def _collect(self, kind: str) -> dict[str, type]:
        spec = KINDS[kind]
        out: dict[str, type] = {}
        for impl in getattr(self.pm.hook, spec.hook).get_hookimpls():
            plugin = self.plugins.get(impl.plugin_name)
            dist = plugin.dist if plugin else impl.plugin_name
            for cls in impl.function() or []:
                tag = getattr(cls, spec.tag_attr, None)
                if not isinstance(tag, str) or not tag:
                    raise PluginError(f"{dist}: {cls.__qualname__} has no '{spec.tag_attr}' tag")
                if tag in out:
                    other = self._origin[(kind, tag)]
                    raise PluginError(
                        f"{spec.label} {spec.tag_attr} '{tag}' is claimed by both "
                        f"'{other}' and '{dist}'; uninstall one or disable it with PRL_DISABLE_PLUGINS"
                    )
                out[tag] = cls
                self._origin[(kind, tag)] = dist
                if plugin:
                    plugin.registers.setdefault(kind, []).append(tag)
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
    from prl.config.base import rebuild_configs

    rebuild_configs()


def register_inline(module: Any, name: str, dist: str = "inline") -> None:
    """Register a module or object as a plugin at runtime (tests and notebooks)."""
    registry = get_registry()
    registry.add(module, name, dist, "0")
    from prl.config.base import rebuild_configs

    try:
        rebuild_configs()
    except PluginError:
        pass  # e.g. a duplicate tag: reported by the next registry lookup or validation


def unregister_inline(name: str) -> None:
    registry = get_registry()
    if registry.pm.has_plugin(name):
        registry.pm.unregister(name=name)
    registry.plugins.pop(name, None)
    registry._classes.clear()
    from prl.config.base import rebuild_configs

    rebuild_configs()
