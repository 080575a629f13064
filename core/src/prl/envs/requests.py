"""Parsing and checking of one request line of the env-server protocol
(:mod:`prl.envs.protocol`).

A line that is not UTF-8, not JSON, not an object, names an unknown method or carries a field
of the wrong type raises :class:`BadRequest` with a message naming what is wrong, which the
server sends back as ``{"ok": false, "error": "BadRequest: ..."}`` before it closes that
connection; the server itself keeps serving.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from prl.contracts.taskset import Task
from prl.types import Sampling

METHODS = ("health", "rollout")


class BadRequest(ValueError):
    """A request line the server cannot act on."""


class _Loose(BaseModel):
    # Newer peers may send fields this version lacks (see prl.envs.wire).
    model_config = ConfigDict(extra="ignore")


class TaskIn(_Loose):
    task_id: str | int
    prompt: list[dict[str, Any]] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)


class ClientIn(_Loose):
    config: dict[str, Any]
    model: str | None = None


class RendererIn(_Loose):
    name: str
    config: dict[str, Any] = Field(default_factory=dict)
    tokenizer: str | None = None


class RolloutIn(_Loose):
    method: str
    task: TaskIn
    sampling: dict[str, Any] | None = None
    policy_version: int = Field(default=0, ge=0, strict=True)
    client: ClientIn
    renderer: RendererIn


_SAMPLING = TypeAdapter(Sampling)
_SAMPLING_FIELDS = set(Sampling.__dataclass_fields__)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "request"
    got = "" if err["type"] == "missing" else f" (got {json.dumps(err.get('input'), default=str)[:80]})"
    return f"{where}: {err['msg']}{got}"


def parse_line(line: bytes) -> dict[str, Any]:
    """The request object of one line; :class:`BadRequest` for anything else."""
    if not line.strip():
        raise BadRequest("empty request line: send one JSON object per line")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"request line is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        req = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"request line is not valid JSON: {exc}") from None
    if not isinstance(req, dict):
        raise BadRequest(f"request must be a JSON object, got {type(req).__name__}")
    method = req.get("method")
    if method not in METHODS:
        raise BadRequest(f"unknown method {method!r}: expected one of {', '.join(METHODS)}")
    return req


def parse_rollout(req: dict[str, Any]) -> tuple[Task, Sampling, int, dict[str, Any], dict[str, Any]]:
    """(task, sampling, policy version, client descriptor, renderer descriptor) of a rollout."""
    try:
        r = RolloutIn.model_validate(req)
        sampling = _SAMPLING.validate_python({k: v for k, v in (r.sampling or {}).items() if k in _SAMPLING_FIELDS})
    except ValidationError as exc:
        raise BadRequest(f"invalid rollout request: {_first_error(exc)}") from None
    task = Task(task_id=str(r.task.task_id), prompt=r.task.prompt, data=r.task.data)
    client = req["client"]
    return task, sampling, r.policy_version, client, req["renderer"]
