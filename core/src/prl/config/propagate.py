"""Run settings ``prl rl`` shares with its components, declared on the components' fields.

A component field that follows a setting of the root config says so with a marker in its
annotation (``Annotated[..., Shared("max_steps")]``); :func:`fill_shared` reads the
markers of each component class and fills the raw config before it is validated. A shared
value is only a default: it fills a field the user left unset. An explicit component value
that disagrees is an error listing every pair; equal values are accepted. ``replace``
settings (``resume``, ``weight_broadcast``) are copied over.

A root config's dump (``rl.json``) keeps every value and records, under ``_inherited``, the
component values a shared setting filled. Loading it back (:func:`release_inherited`) drops
those still equal to what was recorded, so a later file or flag that changes the shared value
fills them anew, while a component value set on purpose still meets the conflict check.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from prl.config.launcher_sections import section_fields

_MISSING = object()
Path_ = tuple[str, ...]


@dataclass(frozen=True)
class Shared:
    """The root setting ``follows`` (``"max_steps"``, ``"model.name"``) fills this field;
    ``replace``: copied over even where the component sets its own."""

    follows: str
    replace: bool = False


@dataclass(frozen=True)
class SharedFields:
    """Fields of this table that follow root settings: ``{field: setting}``."""

    fields: dict[str, str]

    def __hash__(self) -> int:
        return hash(tuple(self.fields.items()))


@dataclass(frozen=True)
class SharedSection:
    """An optional table the root's ``follows`` table turns on or off, then fills (``only``
    those fields, else every field it sets). ``per_key``: a table of such tables, each
    reaching the components its plugin class names in ``rl_components``."""

    follows: str
    only: tuple[str, ...] | None = None
    per_key: bool = False


@dataclass
class _Fill:
    """One propagation pass: the data, the conflicts found and the paths filled."""

    data: dict
    conflicts: list[str] = field(default_factory=list)
    filled: list[Path_] = field(default_factory=list)

    def fill(self, target: Path_, value: Any, source: str) -> None:
        current = _get(self.data, target)
        if current is _MISSING:
            _set(self.data, target, copy.deepcopy(value))
        elif not _same(current, value):
            self.conflicts.append(f"{source}={value!r} vs {'.'.join(target)}={current!r}")
            return
        self.filled.append(target)


def _markers(info: Any) -> list[Any]:
    return [m for m in info.metadata if isinstance(m, (Shared, SharedFields, SharedSection))]


def _component_class(info: Any) -> type[BaseModel] | None:
    """The model class of a root field (``X`` or ``X | None``) that declares shared fields."""
    import typing

    for arg in (info.annotation, *typing.get_args(info.annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            declares = any(_markers(i) for i in arg.model_fields.values()) or section_fields(arg)
            return arg if declares else None
    return None


def components(root: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """``root``'s component fields whose classes declare shared settings."""
    found = {name: _component_class(info) for name, info in root.model_fields.items()}
    return {name: cls for name, cls in found.items() if cls is not None}


def _get(data: Any, path: Path_) -> Any:
    node = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _set(data: dict, path: Path_, value: Any) -> None:
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[path[-1]] = value


def _same(a: Any, b: Any) -> bool:
    return a == b or str(a) == str(b)


def _split(setting: str) -> Path_:
    return tuple(setting.split("."))


def _present(value: Any) -> bool:
    return value is not _MISSING and value is not None


def _follow_field(run: _Fill, comp: str, name: str, marker: Any) -> None:
    data = run.data
    if isinstance(marker, Shared):
        value = _get(data, _split(marker.follows))
        if marker.replace:
            if value is not _MISSING:
                _set(data, (comp, name), copy.deepcopy(value))
                run.filled.append((comp, name))
        elif _present(value):
            run.fill((comp, name), value, marker.follows)
    elif isinstance(marker, SharedFields):
        for key, setting in marker.fields.items():
            value = _get(data, _split(setting))
            if _present(value):
                run.fill((comp, name, key), value, setting)
    elif marker.per_key:
        shared = data.get(marker.follows)
        for key in shared if isinstance(shared, dict) else {}:
            if comp in _reach(marker.follows, key, (comp,)):
                _follow_section(run, (marker.follows, key), (comp, name, key), None)
    elif marker.follows in data:
        _follow_section(run, (marker.follows,), (comp, name), marker.only)


def _reach(section: str, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """The components a plugin's shared table reaches: its class's ``rl_components``
    (prime's monitor: the orchestrator only), else every one that declares the table."""
    from prl.plugins import get_registry

    cls = get_registry().classes(section).get(key)
    return tuple(getattr(cls, "rl_components", default)) if cls is not None else default


def _follow_section(run: _Fill, source: Path_, target: Path_, only: tuple[str, ...] | None) -> None:
    value = _get(run.data, source)
    if value is not None and not isinstance(value, dict):
        return  # not a table: validating the shared field itself reports it
    if value is None:
        _set(run.data, target, None)
        run.filled.append(target)
        return
    if not isinstance(_get(run.data, target), dict):
        _set(run.data, target, {})
    for name in only or value.keys():
        if name in value:
            run.fill((*target, name), value[name], ".".join((*source, name)))


def _check_output_dirs(data: dict, comps: dict[str, type[BaseModel]]) -> None:
    """The run's ``output_dir`` (given, else ``$PRL_OUTPUT_DIR`` or ``outputs``) decides the
    run directory; a component's own ``output_dir`` that differs would be replaced, so it is
    refused instead."""
    if "output_dir" in data:
        return  # compared with each component's as a shared field
    from prl.config.sections import default_output_dir

    run = default_output_dir()
    for comp in comps:
        section = data.get(comp)
        own = section.get("output_dir") if isinstance(section, dict) else None
        if own is not None and Path(str(own)).expanduser().resolve() != Path(run).resolve():
            raise ValueError(
                f"{comp}.output_dir '{own}' differs from the run's output_dir '{run}': "
                "set the top-level output_dir instead"
            )


def fill_shared(raw: dict, root: type[BaseModel]) -> tuple[dict, list[Path_]]:
    """``raw`` with every component field that follows a shared setting filled, and the
    paths filled (or already equal to the shared value)."""
    comps = components(root)
    run = _Fill(copy.deepcopy(raw))
    _check_output_dirs(run.data, comps)
    for comp, cls in comps.items():
        if comp in run.data and run.data[comp] is None:
            continue  # a component switched off (inference = None): nothing to fill
        for name, info in cls.model_fields.items():
            for marker in _markers(info):
                _follow_field(run, comp, name, marker)
        for name in section_fields(cls):
            # a launcher's own section fills the component's only where it is set
            if isinstance(run.data.get(name), dict):
                _follow_section(run, (name,), (comp, name), None)
    if run.conflicts:
        raise ValueError("Shared config conflicts with matching sub-config field(s): " + "; ".join(run.conflicts))
    return run.data, run.filled


def propagate_shared(raw: dict, root: type[BaseModel]) -> dict:
    """``raw`` with ``root``'s shared settings filled into its components."""
    return fill_shared(raw, root)[0]


INHERITED = "_inherited"


def record_inherited(dumped: Any, filled: list[Path_]) -> Any:
    """``dumped`` with the values at ``filled`` recorded under ``_inherited``."""
    if not isinstance(dumped, dict):
        return dumped
    found = {".".join(p): _get(dumped, p) for p in filled}
    found = {k: v for k, v in found.items() if v is not _MISSING}
    return {**dumped, INHERITED: found} if found else dumped


def release_inherited(data: dict, root: type[BaseModel]) -> dict:
    """``data`` (a dump of ``root``, when it has ``_inherited``) without the recorded
    inherited values that no later layer changed, nor the shared tables it holds as null."""
    recorded = data.get(INHERITED)
    if INHERITED not in data:
        return data
    data = copy.deepcopy({k: v for k, v in data.items() if k != INHERITED})
    for dotted, value in (recorded or {}).items() if isinstance(recorded, dict) else ():
        *parents, last = _split(dotted)
        node = _get(data, tuple(parents))
        if isinstance(node, dict) and last in node and _same(node[last], value):
            del node[last]
    _drop_unset_sections(data, root)
    return data


def _drop_unset_sections(data: dict, root: type[BaseModel]) -> None:
    """A dump writes an optional shared table the user never set as null ([ckpt], each
    [monitors.<key>]); read back, a null turns the components' tables off. The components'
    own values in the dump already hold whatever a null the user did set had done, so
    these nulls only go."""
    for cls in components(root).values():
        for info in cls.model_fields.values():
            for marker in _markers(info):
                if not isinstance(marker, SharedSection):
                    continue
                table = data.get(marker.follows, _MISSING)
                if table is None:
                    del data[marker.follows]
                elif marker.per_key and isinstance(table, dict):
                    for key in [k for k, v in table.items() if v is None]:
                        del table[key]
