"""The ``[monitors]`` section: one optional sub-section per installed monitor plugin.

Monitors are keyed by their section name rather than a ``type`` tag, so the section is a
model composed at schema-build time with one optional field per registered monitor.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, create_model
from pydantic_core import core_schema

from prl.config.base import PrlModel


class MonitorsSection:
    """Schema hook for ``[monitors]``. ``component`` sections turn on the monitors whose
    class says ``enabled_by_default``; shared RL-level sections default every key to None."""

    def __init__(self, component: bool) -> None:
        self.component = component

    def model(self) -> type[PrlModel]:
        from prl.plugins import get_registry

        fields: dict[str, Any] = {}
        for key, cls in sorted(get_registry().classes("monitors").items()):
            on = self.component and getattr(cls, "enabled_by_default", False)
            default = Field(default_factory=cls.Config) if on else None
            fields[key] = (cls.Config | None, default)
        name = "MonitorsConfig" if self.component else "SharedMonitorsConfig"
        model = create_model(name, __base__=PrlModel, **fields)
        model.__doc__ = "Metric sinks, one optional section per installed monitor plugin."
        return model

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return handler.generate_schema(self.model())
