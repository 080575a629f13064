"""One agent's side of an episode, recorded as training branches of exact tokens.

A branch is the token sequence the policy saw and wrote: prompt tokens (not sampled),
then each completion exactly as the server returned it (sampled, with its logprobs), then
the tokens that carry the next environment message. The trainer therefore scores the very
ids that were sampled; nothing is re-tokenised.

Turn to turn, the renderer's ``bridge_to_next_turn`` extends the current branch with the
ids of the new messages. When it returns None (or the last completion was cut off, so the
sequence does not end where the template expects), the next turn re-renders the whole
conversation and a new branch starts.

A single-turn rollout is three lines::

    conv = Conversation(renderer, task.prompt)
    reply = await conv.sample(client, sampling)
    return episode_trace(task, conv, reward=score(reply))
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from prl import live
from prl.contracts.inference import InferenceClient
from prl.contracts.renderer import Renderer
from prl.contracts.taskset import Task
from prl.tasks.branches import add_observation, add_sampled, start_branch
from prl.types import Branch, Generation, Sampling, Trace

__all__ = ["Conversation", "episode_trace", "with_default_max_tokens"]


class Conversation:
    """Messages and branches of one agent; ``sample`` asks the policy for the next turn."""

    def __init__(self, renderer: Renderer, messages: list[dict[str, Any]], agent: str = "default") -> None:
        self.renderer = renderer
        self.messages = [dict(m) for m in messages]
        self.agent = agent
        self.branches: list[Branch] = []
        self.turns = 0
        self.truncated = False
        self._open: Branch | None = None  # branch the next turn extends, if any
        self._prompt_len = 0  # tokens of the open branch before its last completion

    async def sample(self, client: InferenceClient, sampling: Sampling) -> str:
        """Generate one assistant turn and return its text content."""
        if self._open is None:
            self._start_branch(sampling)
        branch = self._open
        assert branch is not None
        self._prompt_len = len(branch.token_ids)
        gen: Generation = await client.generate(list(branch.token_ids), sampling)
        add_sampled(branch, gen)
        self.turns += 1
        self.truncated = gen.finish_reason == "length"
        parsed = self.renderer.parse_response(list(gen.token_ids), prompt_ids=branch.token_ids[: self._prompt_len])
        content = str(parsed.get("content") or "")
        message = {"role": "assistant", "content": content}
        if parsed.get("reasoning_content"):
            message["reasoning_content"] = parsed["reasoning_content"]
        self.messages.append(message)
        # The live view (prl.live) shows each turn as it returns; no-op outside a run.
        live.report_turn({"agent": self.agent, "turn": self.turns, "text": content,
                          "tokens": len(gen.token_ids), "finish_reason": gen.finish_reason})  # fmt: skip
        if self.truncated:
            self._open = None  # a cut-off turn has no end token to bridge from
        return content

    def add(self, *messages: dict[str, Any]) -> None:
        """Append environment messages (user/tool) before the next ``sample``."""
        new = [dict(m) for m in messages]
        if self._open is not None:
            branch = self._open
            ids = self.renderer.bridge_to_next_turn(
                branch.token_ids[: self._prompt_len], branch.token_ids[self._prompt_len :], new
            )
            if ids is None:
                self._open = None
            else:
                add_observation(branch, ids, role=new[-1].get("role", "user"))
        self.messages.extend(new)

    def _start_branch(self, sampling: Sampling) -> None:
        rendered = self.renderer.render(self.messages, add_generation_prompt=True)
        branch = start_branch(
            rendered.token_ids, roles=rendered.roles, agent=self.agent, temperature=sampling.temperature
        )
        self.branches.append(branch)
        self._open = branch

    def sampled_tokens(self) -> int:
        return sum(sum(b.sampled_mask) for b in self.branches)


def with_default_max_tokens(sampling: Sampling, max_tokens: int) -> Sampling:
    """Tasks bound their answers; an explicit ``max_tokens`` from the run still wins."""
    return sampling if sampling.max_tokens is not None else replace(sampling, max_tokens=max_tokens)


def episode_trace(
    task: Task,
    *conversations: Conversation,
    reward: float,
    agent_rewards: dict[str, float] | None = None,
    metrics: dict[str, float] | None = None,
    env: str = "",
) -> Trace:
    """The scored episode of ``conversations`` (one per agent, in order).

    Branches and messages are concatenated, turns summed; the episode is truncated, with
    stop condition ``length``, when any conversation's last turn was cut off. ``env`` may
    stay empty: the source that runs the taskset stamps its own name on every trace.
    """
    truncated = any(c.truncated for c in conversations)
    return Trace(
        trace_id="",
        task_id=task.task_id,
        env=env,
        branches=[b for c in conversations for b in c.branches],
        reward=reward,
        agent_rewards=dict(agent_rewards or {}),
        metrics=dict(metrics or {}),
        messages=[m for c in conversations for m in c.messages],
        turns=sum(c.turns for c in conversations),
        is_truncated=truncated,
        stop_condition="length" if truncated else "stop",
    )
