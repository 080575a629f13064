"""Registers prl's renderers: ``auto``, ``default``, ``custom`` and every ``renderers`` family."""

from __future__ import annotations

from prl import hookimpl


@hookimpl
def prl_register_renderers() -> list[type]:
    from prl_renderers.auto import AutoRenderer
    from prl_renderers.custom import CustomRenderer
    from prl_renderers.default import DefaultRenderer
    from prl_renderers.families import FAMILIES

    return [AutoRenderer, DefaultRenderer, CustomRenderer, *FAMILIES]
