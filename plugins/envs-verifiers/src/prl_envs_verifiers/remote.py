"""The orchestrator's side of a verifiers env server, and episode → prl Trace conversion.

Each rollout sends verifiers' ``run`` request with a *train* client config: the env
server's agent then samples through ``<base_url>/inference/v1/generate`` with prompts
rendered by verifiers' renderer pool for the same tokenizer prl renders with. The
returned episode holds one verifiers trace per agent seat, each with trainable branches
whose ``token_ids`` / ``sampled_mask`` / ``logprobs`` are copied verbatim into prl
branches (:func:`prl.tasks.copy_branch`, which refuses misaligned lists; agent = the seat
name, or ``default`` for single-seat envs).

Reward: the sum of the trace's weighted reward components (verifiers' ``Trace.reward``);
with several seats ``trace.reward`` is their mean and ``agent_rewards`` has each seat.
Each reward component is also reported as metric ``reward/<name>``.
"""

from __future__ import annotations

from typing import Any

from prl.contracts.renderer import Renderer
from prl.contracts.taskset import Task
from prl.tasks import copy_branch
from prl.types import Branch, Sampling, Trace


def train_client_config(client: Any, renderer: Renderer, renderer_config: dict[str, Any] | None) -> Any:
    """verifiers ``TrainClientConfig`` that reaches the same inference server as ``client``."""
    from verifiers.v1.configs.client import TrainClientConfig

    base_url = getattr(client, "base_url", None)
    if not base_url:
        raise ValueError(f"{type(client).__name__} has no base_url; verifiers' env server cannot reach inference")
    data: dict[str, Any] = {
        "type": "train",
        "base_url": str(base_url).rstrip("/") + "/v1",
        "api_key_var": "PRL_API_KEY",  # never the Prime platform key: this is a local server
        "renderer_model_name": renderer.tokenizer_path or None,
    }
    if renderer_config is not None:
        data["renderer"] = renderer_config
    return TrainClientConfig.model_validate(data)


def sampling_config(sampling: Sampling) -> Any:
    from verifiers.v1.types import SamplingConfig

    extra = {
        k: v for k, v in (("top_k", sampling.top_k), ("seed", sampling.seed), ("stop", sampling.stop)) if v is not None
    }
    return SamplingConfig(
        temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_tokens, **extra
    )


def episode_to_trace(episode: Any, task: Task, sampling: Sampling) -> Trace:
    branches: list[Branch] = []
    rewards: dict[str, float] = {}
    metrics: dict[str, float] = {}
    errors = [f"{e.type}: {e.message}" for e in episode.errors]
    multi = len(episode.traces) > 1
    for vt in episode.traces:
        # A lone seat is prl's single agent ("default"); several seats keep their names.
        seat = (vt.agent.name if vt.agent is not None else "agent") if multi else "default"
        rewards[seat] = float(vt.reward)
        for b in vt.branches:
            if b.trainable:
                # Checked on the way in: a misaligned branch would train on the wrong tokens.
                branches.append(
                    copy_branch(b.token_ids, b.sampled_mask, b.logprobs, agent=seat, temperature=sampling.temperature)
                )
        metrics.update({k: float(v) for k, v in vt.metrics.items() if v is not None})
        metrics.update({f"reward/{k}": float(r.score) for k, r in vt.rewards.items() if r is not None})
        errors += [f"{e.type}: {e.message}" for e in vt.errors]
    first = episode.traces[0] if episode.traces else None
    return Trace(
        trace_id=episode.id,
        task_id=task.task_id,
        env="",
        branches=branches,
        reward=sum(rewards.values()) / len(rewards) if rewards else 0.0,
        agent_rewards=rewards if len(rewards) > 1 else {},
        metrics=metrics,
        messages=[m.model_dump(mode="json", exclude_none=True) for m in first.messages] if first else list(task.prompt),
        turns=sum(vt.num_turns for vt in episode.traces) or 1,
        is_truncated=any(vt.is_truncated for vt in episode.traces),
        is_timeout=bool(episode.is_timeout or any(vt.is_timeout for vt in episode.traces)),
        error="; ".join(errors) or None,
        stop_condition=(first.stop_condition if first and first.stop_condition else "stop"),
    )


class VerifiersRemote:
    """One source's connection to its verifiers env server."""

    def __init__(self, address: str, renderer_config: dict[str, Any] | None) -> None:
        from verifiers.v1.serve.client import EnvClient

        self.address = address
        self.renderer_config = renderer_config
        self._client = EnvClient(f"tcp://{address}")

    async def health(self, timeout: float = 5.0) -> bool:
        try:
            await self._client.wait_for_server_startup(timeout=max(timeout, 60.0), interval=0.5)
        except TimeoutError:
            return False
        return True

    async def rollout(
        self, task: Task, client: Any, renderer: Renderer, sampling: Sampling, policy_version: int
    ) -> Trace:
        model = getattr(client, "model", None)
        if not model:
            raise ValueError(f"{type(client).__name__} has no model name to send to verifiers' env server")
        episode = await self._client.run(
            train_client_config(client, renderer, self.renderer_config),
            model,
            sampling_config(sampling),
            task.data["vf"],
        )
        return episode_to_trace(episode, task, sampling)

    async def close(self) -> None:
        await self._client.close()
