"""The ``[monitors]`` section: one optional sub-section per installed monitor plugin.

Monitors are keyed by their section name rather than a ``type`` tag, so the section is a
model composed at schema-build time with one optional field per registered monitor.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, create_model

from prl.config.base import ComposedSection, PrlModel


class MonitorsSection(ComposedSection):
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


def check_run_wide(trainer: Any, orchestrator: Any) -> None:
    """Monitors whose class names ``run_wide`` fields (W&B: ``project``) log one run from
    both sides: each must be on in trainer and orchestrator or in neither, with those fields
    equal. Raises ValueError naming the monitor and the fields."""
    from prl.plugins import get_registry

    for key, cls in sorted(get_registry().classes("monitors").items()):
        fields = getattr(cls, "run_wide", None)
        if fields is None:
            continue
        mine, theirs = getattr(trainer.monitors, key, None), getattr(orchestrator.monitors, key, None)
        if (mine is None) != (theirs is None):
            on, off = ("trainer", "orchestrator") if theirs is None else ("orchestrator", "trainer")
            raise ValueError(
                f"monitors.{key} is on for the {on} but not the {off}: turn it on for both "
                f"([monitors.{key}] at the top level) or for neither"
            )
        for name in fields if mine is not None else ():
            a, b = getattr(mine, name), getattr(theirs, name)
            if a != b:
                raise ValueError(
                    f"monitors.{key}.{name} differs: trainer {a!r}, orchestrator {b!r} (they must log one run)"
                )
