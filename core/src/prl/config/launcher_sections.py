"""Sections a launcher plugin owns, composed into the root configs from the registry.

The spec names a launcher's own section after the launcher's ``type``: at the top level of a
run's config (the settings of the job that runs it) and under ``[inference]`` (a server run
as a job of its own). Core declares the field where the spec has one; its class is the one
the launcher declares as :attr:`prl.contracts.launcher.Launcher.SectionConfig`, so core
reads none of its fields. Setting the section selects its launcher (:func:`pick_launcher`),
and under ``prl rl`` the top-level one fills the inference server's
(:mod:`prl.config.propagate`).
"""

from __future__ import annotations

import typing
from typing import Annotated, Any

from pydantic import BaseModel
from pydantic_core import PydanticCustomError, core_schema

from prl.config.base import ComposedSection, PrlModel
from prl.known_plugins import install_hint


class LauncherSection(ComposedSection):
    """Schema hook of the section launcher ``tag`` owns: the class it declares. A section set
    while that launcher is not installed fails naming what to install."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def declared(self) -> type[PrlModel] | None:
        from prl.plugins import get_registry

        cls = get_registry().classes("launchers").get(self.tag)
        return getattr(cls, "SectionConfig", None)

    def model(self) -> type[PrlModel]:
        return self.declared() or PrlModel

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        model = self.declared()
        if model is None:
            return core_schema.no_info_plain_validator_function(self._missing)
        return handler.generate_schema(model)

    def _missing(self, value: Any) -> Any:
        raise PydanticCustomError(
            "plugin_missing",
            "[{tag}] belongs to the '{tag}' launcher, which is not installed{hint}",
            {"tag": self.tag, "hint": install_hint("launchers", self.tag)},
        )


def launcher_section(tag: str) -> Any:
    """Field type of the section launcher ``tag`` owns; None (the default) leaves it off."""
    return Annotated[PrlModel, LauncherSection(tag)] | None


def _hook(annotation: Any) -> LauncherSection | None:
    if isinstance(annotation, LauncherSection):
        return annotation
    for arg in typing.get_args(annotation):
        found = _hook(arg)
        if found is not None:
            return found
    return None


def section_fields(model: type[BaseModel]) -> dict[str, str]:
    """``model``'s launcher sections: field name -> the tag of the launcher that owns it."""
    hooks = {name: _hook(info.annotation) for name, info in model.model_fields.items()}
    return {name: hook.tag for name, hook in hooks.items() if hook is not None}


def sections_set(config: BaseModel) -> dict[str, str]:
    """The launcher sections ``config`` sets: field name -> launcher tag."""
    fields = section_fields(type(config))
    return {name: tag for name, tag in fields.items() if getattr(config, name) is not None}


def owned_sections() -> list[str]:
    """Tags of the installed launchers that declare a section of their own."""
    from prl.plugins import get_registry

    classes = get_registry().classes("launchers")
    return sorted(tag for tag, cls in classes.items() if getattr(cls, "SectionConfig", None) is not None)


def pick_launcher(data: dict, model: type[BaseModel]) -> dict:
    """Fill ``[deployment] type`` of a raw root config: a launcher section that is set picks
    its launcher when the type is left out or is one of the reference's spellings, which
    otherwise pick the launcher that declares them (``reference_types``). A type naming
    another installed launcher is a ValueError. The topology fields are kept as given."""
    from prl.plugins import get_registry

    classes = get_registry().classes("launchers")
    # The spec gives a run one launcher section. One whose launcher is not installed picks
    # nothing: validating the section names what to install.
    on = [tag for name, tag in section_fields(model).items() if data.get(name) is not None]
    picked = on[0] if on and on[0] in classes else None
    dep = data.get("deployment")
    if dep is None:
        return {**data, "deployment": {"type": picked}} if picked else data
    if not isinstance(dep, dict):
        return data
    kind = dep.get("type")
    if kind is not None and not isinstance(kind, str):
        return data  # a type that is no name (a table, a list): validation rejects it in one line
    spellings = {s: tag for tag, cls in sorted(classes.items()) for s in getattr(cls, "reference_types", ())}
    if kind is None or kind in spellings:
        tag = picked or spellings.get(kind)
        return {**data, "deployment": {**dep, "type": tag}} if tag else data
    if picked and kind != picked and kind in classes:
        raise ValueError(
            f"[{picked}] is set but [deployment] type is '{kind}': use type = '{picked}' or drop [{picked}]"
        )
    return data
