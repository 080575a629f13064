"""Group-level defaults of eval sources (``[orchestrator.eval]`` of ``prl rl``, ``[eval]`` of
``prl sft``).

The group's ``select``, ``group_size``, ``sampling`` and ``num_examples`` are the default of
every ``[[...eval.source]]``: a value the source sets itself wins, the group fills only what
the source left unset, field by field (``select.shuffle`` from the group and
``select.limit`` from the source combine). ``num_examples`` is the default of
``select.limit``, after the group's own ``select.limit``.

The filled values are written into each source at validation, so the resolved configs of a
run (``configs/attempt_N/resolved/``) show what every source really uses, and a child that
re-reads them sees every field as set and fills nothing more.
"""

from __future__ import annotations

from typing import Any


def _unset(model: Any) -> set[str]:
    return set(type(model).model_fields) - model.model_fields_set


def _fill(model: Any, default: Any, fields: set[str]) -> Any:
    """``model`` with each of ``fields`` it left unset taken from ``default``."""
    update = {f: getattr(default, f) for f in fields & _unset(model)}
    return model.model_copy(update=update) if update else model


def fill_source(group: Any, source: Any) -> Any:
    """``source`` with the group's defaults filled in (see the module docstring)."""
    select = _fill(source.select, group.select, group.select.model_fields_set)
    if select.limit is None and group.num_examples is not None:
        select = select.model_copy(update={"limit": group.num_examples})
    # A partial sampling config: None means unset, whether or not it was spelled out.
    given = {f for f, v in group.sampling if v is not None}
    sampling = source.sampling.model_copy(
        update={f: getattr(group.sampling, f) for f in given if getattr(source.sampling, f) is None}
    )
    group_size = source.group_size if source.group_size is not None else group.group_size
    return source.model_copy(update={"select": select, "sampling": sampling, "group_size": group_size})
