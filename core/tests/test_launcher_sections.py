"""A launcher's own section ([slurm], inference.slurm) is the class the launcher declares,
found through the registry; setting it selects that launcher."""

from __future__ import annotations

from typing import ClassVar, Literal

import pytest
from pydantic import ValidationError

from prl import hookimpl
from prl.config.base import PrlModel
from prl.config.components import InferenceConfig
from prl.config.launcher_sections import launcher_section, pick_launcher, section_fields, sections_set
from prl.config.roots import RLConfig
from prl.contracts.launcher import Launcher, LauncherConfig
from prl.plugins import get_registry


class _Own(PrlModel):
    queue: str = "default"


class _SectionLauncher(Launcher):
    """A launcher with a section of its own and a reference spelling."""

    type: ClassVar[str] = "own-section"
    SectionConfig = _Own
    reference_types: ClassVar[tuple[str, ...]] = ("many_hosts",)

    class Config(LauncherConfig):
        type: Literal["own-section"] = "own-section"

    def launch(self, processes) -> int:
        return 0


class _Plugin:
    @hookimpl
    def prl_register_launchers(self):
        return [_SectionLauncher]


class _Root(PrlModel):
    deployment: dict | None = None
    mine: launcher_section("own-section") = None
    absent: launcher_section("not-installed") = None


def test_slurm_sections_are_the_slurm_launchers_class():
    cls = get_registry().classes("launchers").get("slurm")
    if cls is None:
        pytest.skip("the slurm launcher is not installed")
    assert section_fields(RLConfig) == {"slurm": "slurm"} == section_fields(InferenceConfig)
    config = RLConfig.model_validate({"slurm": {}})
    assert type(config.slurm) is cls.SectionConfig and config.deployment.type == "slurm"
    assert sections_set(config) == {"slurm": "slurm"} and sections_set(RLConfig()) == {}
    assert type(InferenceConfig.model_validate({"slurm": {}}).slurm) is cls.SectionConfig


def test_a_section_is_validated_as_the_declared_class_and_picks_its_launcher(register_plugin):
    register_plugin(_Plugin(), "own-section-plugin", "prl-own-section-dist")
    assert _Root.model_validate({"mine": {"queue": "q"}}).mine == _Own(queue="q")
    with pytest.raises(ValidationError, match="queue"):
        _Root.model_validate({"mine": {"queue": 1}})
    assert pick_launcher({"mine": {}}, _Root)["deployment"] == {"type": "own-section"}
    # the reference's spelling picks the launcher that declares it, keeping the rest
    picked = pick_launcher({"deployment": {"type": "many_hosts", "nodes": 2}}, _Root)
    assert picked["deployment"] == {"type": "own-section", "nodes": 2}
    if "local" in get_registry().classes("launchers"):
        with pytest.raises(ValueError, match=r"\[own-section\] is set but \[deployment\] type is 'local'"):
            pick_launcher({"mine": {}, "deployment": {"type": "local"}}, _Root)


def test_a_section_whose_launcher_is_missing_names_it_and_picks_nothing():
    assert _Root().absent is None
    with pytest.raises(ValidationError, match="belongs to the 'not-installed' launcher, which is not installed"):
        _Root.model_validate({"absent": {}})
    assert pick_launcher({"absent": {}}, _Root) == {"absent": {}}
