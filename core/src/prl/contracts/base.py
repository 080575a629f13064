"""Common base of every plugin class: binds the nested ``Config`` to its owner."""

from __future__ import annotations

from typing import Any, ClassVar

from prl.config.base import PluginConfigBase, bind_config


class Plugin:
    """Base of every contract class. A subclass that nests its own ``Config`` becomes what
    ``Config.build(**runtime)`` constructs (torchtitan's configurable pattern)."""

    Config: ClassVar[type[PluginConfigBase]] = PluginConfigBase
    # The class picked when a config leaves its kind's tag out. Declared by the plugin that
    # wants to be the default (core names none); two installed defaults of a kind are an error.
    is_default: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Config" in cls.__dict__:
            bind_config(cls.__dict__["Config"], cls)
        # Being the default is a claim a class makes for itself: a subclass of the default
        # trainer under a new tag must not silently claim it too.
        if "is_default" not in cls.__dict__:
            cls.is_default = False
