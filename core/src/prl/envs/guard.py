"""Run one rollout so that nothing inside it can stop the caller.

A rollout ends in exactly one of three ways, and each is a :class:`prl.types.Trace`:

* it returns a trace: the env name, policy version and a trace id are stamped on it;
* it raises: ``trace.error = "<ExceptionType>: <message>"`` with no branches;
* it runs past ``timeout`` seconds: it is cancelled and ``trace.is_timeout`` is set.

Only cancellation of the caller itself propagates (the orchestrator cancels stale groups).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable

from prl.contracts.taskset import Task
from prl.types import Trace

log = logging.getLogger(__name__)


def new_trace_id() -> str:
    return uuid.uuid4().hex


def failed_trace(task: Task, env: str, policy_version: int, error: str | None = None, timeout: bool = False) -> Trace:
    """An empty trace that records why a rollout produced nothing."""
    return Trace(
        trace_id=new_trace_id(),
        task_id=task.task_id,
        env=env,
        branches=[],
        reward=0.0,
        error=error,
        is_timeout=timeout,
        policy_version=policy_version,
        stop_condition="timeout" if timeout else "error",
        messages=list(task.prompt),
    )


async def guarded(work: Awaitable[Trace], task: Task, env: str, policy_version: int, timeout: float | None) -> Trace:
    """Await ``work`` under ``timeout``; failures become recorded traces, never exceptions."""
    try:
        async with asyncio.timeout(timeout):
            trace = await work
    except TimeoutError:
        log.warning("rollout of task %s in env %s timed out after %ss", task.task_id, env, timeout)
        return failed_trace(task, env, policy_version, f"timed out after {timeout:g}s", timeout=True)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a broken rollout is data for the caller
        log.warning("rollout of task %s in env %s failed: %s: %s", task.task_id, env, type(exc).__name__, exc)
        return failed_trace(task, env, policy_version, f"{type(exc).__name__}: {exc}")
    if not isinstance(trace, Trace):
        return failed_trace(task, env, policy_version, f"TypeError: rollout returned {type(trace).__name__}, not Trace")
    trace.env = env
    trace.policy_version = policy_version
    trace.task_id = trace.task_id or task.task_id
    trace.trace_id = trace.trace_id or new_trace_id()
    return trace
