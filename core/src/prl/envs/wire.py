"""JSON forms of the env data types, shared by the env server and its clients.

Everything crossing a process boundary is plain JSON: tasks, sampling, traces. Dataclass
fields map one to one, so a field added to :mod:`prl.types` travels without changes here
as long as it is JSON-serialisable.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from prl.contracts.taskset import Task
from prl.types import Branch, Sampling, Trace


def task_to_dict(task: Task) -> dict[str, Any]:
    return dataclasses.asdict(task)


def task_from_dict(data: dict[str, Any]) -> Task:
    return Task(task_id=str(data["task_id"]), prompt=list(data.get("prompt") or []), data=dict(data.get("data") or {}))


def sampling_to_dict(sampling: Sampling) -> dict[str, Any]:
    return dataclasses.asdict(sampling)


def sampling_from_dict(data: dict[str, Any]) -> Sampling:
    return Sampling(**_known(Sampling, data))


def trace_to_dict(trace: Trace) -> dict[str, Any]:
    return dataclasses.asdict(trace)


def trace_from_dict(data: dict[str, Any]) -> Trace:
    fields = _known(Trace, data)
    fields["branches"] = [Branch(**_known(Branch, b)) for b in data.get("branches") or []]
    return Trace(**fields)


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    # A newer peer may send fields this version lacks; dropping them keeps old and new
    # orchestrators and env servers interoperable within one major version.
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}
