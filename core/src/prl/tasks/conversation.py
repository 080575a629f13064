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
from prl.images import has_image_parts, split_image_refs
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
        self._images: list[str] = []  # the open branch's images, sent with each turn

    async def sample(self, client: InferenceClient, sampling: Sampling) -> str:
        """Generate one assistant turn and return its text content."""
        if self._open is None:
            self._start_branch(sampling)
        branch = self._open
        assert branch is not None
        self._prompt_len = len(branch.token_ids)
        if self._images:
            gen: Generation = await client.generate(list(branch.token_ids), sampling, images=self._images)  # type: ignore[call-arg]
            if gen.prompt_token_ids is not None:
                self._widen(branch, gen.prompt_token_ids)
        else:
            gen = await client.generate(list(branch.token_ids), sampling)
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
        if has_image_parts(new):
            self._open = None  # the next turn re-renders the conversation with every image
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
        # image parts render as one placeholder each; the images go with the prompt and the
        # server widens each placeholder to the image's patch tokens (_widen)
        messages, self._images = self.messages, []
        if has_image_parts(self.messages):
            messages, self._images = split_image_refs(self.messages)
        rendered = self.renderer.render(messages, add_generation_prompt=True)
        branch = start_branch(
            rendered.token_ids, roles=rendered.roles, agent=self.agent, temperature=sampling.temperature
        )
        branch.images = list(self._images) or None
        self.branches.append(branch)
        self._open = branch

    def _widen(self, branch: Branch, prompt_ids: list[int]) -> None:
        """Replace the prompt of a fresh ``branch`` by the server's widened one, so the
        branch holds the very ids the policy saw; each widened run keeps its token's role."""
        if len(branch.token_ids) != self._prompt_len:
            raise ValueError("a branch is widened before its first completion only")
        roles = None if branch.roles is None else _widened_roles(branch.token_ids, branch.roles, prompt_ids)
        n = len(prompt_ids)
        branch.token_ids, branch.sampled_mask, branch.logprobs = list(prompt_ids), [False] * n, [0.0] * n
        branch.roles = roles
        self._prompt_len = n

    def sampled_tokens(self) -> int:
        return sum(sum(b.sampled_mask) for b in self.branches)


def _widened_roles(old: list[int], roles: list[str], new: list[int]) -> list[str]:
    """Roles of ``new``, which is ``old`` with some tokens repeated in place (an image
    placeholder widened to a run): a repeated token takes the role of the one it repeats."""
    out: list[str] = []
    j = 0
    for i, (tok, role) in enumerate(zip(old, roles, strict=True)):
        if j >= len(new) or new[j] != tok:
            raise ValueError(f"the server's prompt differs from the one sent at token {i}")
        out.append(role)
        j += 1
        following = old[i + 1] if i + 1 < len(old) else None
        while j < len(new) and new[j] == tok and new[j] != following:
            out.append(role)
            j += 1
    if j != len(new):
        raise ValueError("the server's prompt is longer than the one sent")
    return out


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
