"""verifiers v1 tasksets as prl tasksets, served by verifiers' own env server.

Ids (prl's ``env.taskset.id``; two plugins may not claim one id and prl-tasks-builtin owns
plain ``reverse-text``):

* ``verifiers`` with ``name = "<verifiers taskset id>"`` runs any installed verifiers
  taskset package (``name = "gsm8k-v1"`` imports ``gsm8k_v1``);
* ``vf-<name>`` runs a taskset this distribution ships under the same verifiers id
  (today ``vf-reverse-text``, package :mod:`vf_reverse_text`).

``args`` become the verifiers taskset's config fields; ``env.agent.harness.{id,args}`` and
``env.agent.runtime.{type,args}`` become verifiers' ``env.agent.harness`` and
``env.agent.runtime`` (``runtime.type = "subprocess"`` runs locally with no credentials).
When the verifiers taskset config has a ``split`` field, prl's train/eval split is passed.

Process layout: the taskset is never run in the orchestrator (``in_process = False``);
one ``prl env-server`` per source hosts ``verifiers.v1.serve.EnvServer`` (ZMQ), and the
orchestrator talks to it with ``verifiers.v1.serve.EnvClient``, so both sides must run the
same verifiers version. Tasks are loaded on the orchestrator side and shipped whole, as
verifiers expects. Model calls inside the episode go through verifiers' train client, the
token-in/token-out ``/inference/v1/generate`` route of prl's inference server, so every
branch reaches the trainer with exact token ids, sampled mask and sampling logprobs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

from prl.contracts.taskset import Task, Taskset, TasksetConfig
from prl.types import Sampling, Trace


class VerifiersTaskset(Taskset):
    """Any installed verifiers v1 taskset, selected by ``name``."""

    id = "verifiers"
    in_process = False

    class Config(TasksetConfig):
        """A verifiers v1 taskset (generic)."""

        id: Literal["verifiers"] = "verifiers"
        """Taskset id."""
        name: str
        """verifiers taskset id: an installed taskset package (vf-reverse-text, gsm8k-v1, ...)."""
        args: dict[str, Any] = {}
        """Fields of that taskset's config (verifiers' --env.taskset.*), e.g. data_path."""
        renderer: dict[str, Any] | None = None
        """renderers-package RendererConfig for verifiers' train client; None resolves it from the tokenizer."""
        max_concurrent: int | None = None
        """Episodes the env server runs at once; None means no limit."""

    @property
    def vf_id(self) -> str:
        return self.config.name

    def env_data(self, split: str | None = None) -> dict[str, Any]:
        """verifiers' ``[env]`` block for this source."""
        from verifiers.v1.utils.loaders import taskset_config_type

        taskset = {**self.config.args, "id": self.vf_id}
        if (
            split is not None
            and "split" in taskset_config_type(self.vf_id).model_fields
            and "split" not in self.config.args
        ):
            taskset["split"] = split
        agent = getattr(self, "env_config", None)
        data: dict[str, Any] = {"taskset": taskset}
        if agent is not None:
            harness, runtime = agent.agent.harness, agent.agent.runtime
            data["agent"] = {
                "harness": {**harness.args, "id": harness.id},
                "runtime": {**runtime.args, "type": runtime.type},
            }
        else:
            data["agent"] = {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}
        return data

    def tasks(self, split: str = "train") -> Iterator[Task]:
        from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

        env = resolve_env_config(self.env_data(split))
        for vf_task in load_taskset(env.taskset):
            data = vf_task.data
            task_id = data.id or str(data.idx)
            yield Task(
                task_id=task_id, prompt=_messages(data), data={"vf": data.model_dump(mode="json", exclude_none=True)}
            )

    async def rollout(self, task: Task, client: Any, renderer: Any, sampling: Sampling) -> Trace:
        raise RuntimeError(f"taskset '{self.id}' runs behind its env server; roll out through prl.envs.EnvSource")

    # ---- env server (the `prl env-server` process) -----------------------------------
    async def serve(self, host: str, on_bound: Callable[[str], None]) -> None:
        from verifiers.v1.serve.server import EnvServer
        from verifiers.v1.utils.loaders import resolve_env_config

        server = EnvServer(
            config=resolve_env_config(self.env_data()),
            address=f"tcp://{host}:0",
            max_concurrent=self.config.max_concurrent,
        )
        on_bound(server.address.removeprefix("tcp://"))
        await server.run()

    # ---- orchestrator side -----------------------------------------------------------
    def connect(self, address: str) -> Any:
        from prl_envs_verifiers.remote import VerifiersRemote

        return VerifiersRemote(address, self.config.renderer)


class VfReverseText(VerifiersTaskset):
    """verifiers' reverse-text taskset shipped here (package vf_reverse_text)."""

    id = "vf-reverse-text"

    class Config(TasksetConfig):
        """vf-reverse-text: reverse a text, scored by LCS ratio, run through verifiers."""

        id: Literal["vf-reverse-text"] = "vf-reverse-text"
        """Taskset id (also the verifiers taskset id)."""
        args: dict[str, Any] = {}
        """vf_reverse_text config fields: data_path (local JSONL), num_examples, seed."""
        renderer: dict[str, Any] | None = None
        """renderers-package RendererConfig for verifiers' train client; None resolves it from the tokenizer."""
        max_concurrent: int | None = None
        """Episodes the env server runs at once; None means no limit."""

    @property
    def vf_id(self) -> str:
        return "vf-reverse-text"


def _messages(data: Any) -> list[dict[str, Any]]:
    """The task's opening conversation, for logs and the dashboard."""
    out: list[dict[str, Any]] = []
    if data.system_prompt:
        out.append({"role": "system", "content": data.system_prompt})
    if isinstance(data.prompt, str):
        out.append({"role": "user", "content": data.prompt})
    elif data.prompt:
        out += [
            m.model_dump(mode="json", exclude_none=True) if hasattr(m, "model_dump") else dict(m) for m in data.prompt
        ]
    return out
