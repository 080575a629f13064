"""``assert_plugin_contract``: what every plugin class must satisfy to be loaded and built.

A plugin's own test calls it on each class it registers::

    from prl.testing import assert_plugin_contract

    def test_contract():
        assert_plugin_contract(MyLoss)

It checks, with one message per broken rule: the class subclasses its kind's contract, has
a non-empty tag, nests a ``Config`` whose tag field is a ``Literal`` of that same tag and
defaults to it, that ``Config`` builds this class (``config.build``), every method of the
contract the class overrides still takes the contract's arguments (core calls
``receive(version, timeout, load)``, not whatever an override kept of it), and the class is
registered under that tag when its distribution is installed.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

from prl.config.base import PluginConfigBase
from prl.plugins import KINDS, Kind, get_registry


def kind_of(cls: type) -> Kind[Any]:
    """The plugin kind whose contract ``cls`` subclasses."""
    for kind in KINDS.values():
        if isinstance(cls, type) and issubclass(cls, kind.base):
            return kind
    contracts = ", ".join(k.base.__qualname__ for k in KINDS.values())
    raise AssertionError(f"{cls!r} subclasses none of the plugin contracts ({contracts})")


def assert_plugin_contract(cls: type, *, registered: bool = True, **runtime: Any) -> None:
    """Fail with a plain message when ``cls`` breaks the plugin contract.

    Args:
        cls: the plugin class.
        registered: also require that the installed registry maps the tag to ``cls``
            (switch off for a class a test registers itself).
        **runtime: runtime arguments ``Config.build`` needs for this kind (``tokenizer``
            for renderers, ``run_dir`` for transports and launchers, ...); without them the
            build is not attempted (nor when the Config has required fields).
    """
    kind = kind_of(cls)
    tag = getattr(cls, kind.tag_attr, None)
    assert isinstance(tag, str) and tag, f"{cls.__qualname__}.{kind.tag_attr} must be a non-empty string"
    config = cls.__dict__.get("Config")
    assert isinstance(config, type) and issubclass(config, PluginConfigBase), (
        f"{cls.__qualname__} must nest its own `class Config(...)` (a {kind.label} config)"
    )
    _check_tag_field(cls, config, kind, tag)
    assert config.plugin_class() is cls, f"{config.__qualname__}.build() builds {config.plugin_class()!r}, not {cls!r}"
    _check_signatures(cls, kind.base)
    if registered:
        found = get_registry().classes(kind).get(tag)
        assert found is cls, f"{kind.label} {kind.tag_attr} '{tag}' is registered as {found!r}, not {cls!r}"
    defaults_only = not any(f.is_required() for f in config.model_fields.values())
    if defaults_only and (runtime or _builds_without_runtime(kind)):
        built = config().build(**runtime)
        assert isinstance(built, cls), f"{config.__qualname__}().build() returned {type(built)!r}"


def _check_tag_field(cls: type, config: type, kind: Kind[Any], tag: str) -> None:
    # Monitors are keyed by their [monitors.<key>] section, not by a tag field.
    if kind.tag_attr == "key":
        return
    field = config.model_fields.get(kind.tag_attr)
    assert field is not None, f"{config.__qualname__} must have a `{kind.tag_attr}: Literal[{tag!r}]` field"
    assert typing.get_origin(field.annotation) is typing.Literal and typing.get_args(field.annotation) == (tag,), (
        f"{config.__qualname__}.{kind.tag_attr} must be typed Literal[{tag!r}], got {field.annotation!r}"
    )
    assert field.default == tag, f"{config.__qualname__}.{kind.tag_attr} must default to {tag!r}"


def _check_signatures(cls: type, contract: type) -> None:
    """Each method ``contract`` declares that ``cls`` overrides accepts the contract's call:
    its arguments by position, and by name where the contract lets callers name them."""
    for name in vars(contract):
        if (name.startswith("_") and name not in ("__init__", "__call__")) or not callable(getattr(cls, name, None)):
            continue
        # Methods only: a contract's class attributes (a section class a plugin sets, say) have no call to check.
        if not inspect.isroutine(getattr(contract, name)) or isinstance(getattr(cls, name), type):
            continue
        mine = getattr(cls, name)
        if inspect.unwrap(mine) is inspect.unwrap(getattr(contract, name)):
            continue
        expected = inspect.signature(getattr(contract, name))
        got = inspect.signature(mine)
        params = expected.parameters.values()
        only_positional = [p.name for p in params if p.kind is p.POSITIONAL_ONLY]
        either = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        keyword_only = {p.name: None for p in params if p.kind is p.KEYWORD_ONLY}
        # Every argument the contract declares, optional ones too, passed both ways.
        calls = [(only_positional + either, keyword_only), (only_positional, {**dict.fromkeys(either), **keyword_only})]
        for args, kwargs in calls:
            try:
                got.bind(*args, **kwargs)
            except TypeError as exc:
                raise AssertionError(
                    f"{cls.__qualname__}.{name}{got} does not take the call {contract.__qualname__}.{name}{expected} "
                    f"promises ({exc})"
                ) from None


def _builds_without_runtime(kind: Kind[Any]) -> bool:
    # These kinds' plugins are built from their config alone.
    return kind.name in ("algorithms", "losses", "tasksets")
