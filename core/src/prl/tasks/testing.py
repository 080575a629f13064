"""A byte-level renderer and a scripted inference client, for testing tasksets offline.

No model and no server: :class:`ByteRenderer` is a complete renderer over a ChatML-like
byte vocabulary (ids 0..255 are bytes, 256 opens a message, 257 ends one) and
:class:`ScriptedClient` stands in for the inference server. It decodes the prompt ids it
is sent back into messages, asks a ``policy(messages) -> reply text`` function for the
reply and answers with that text's byte ids plus the end token, each with logprob
``ScriptedClient.LOGPROB``. A rollout against them is fully determined by the policy, so a
test can state the exact branch it expects::

    renderer, client = ByteRenderer(), ScriptedClient(lambda msgs: "42")
    trace = await taskset.rollout(task, client, renderer, Sampling())
    prompt = renderer.render_ids(task.prompt, add_generation_prompt=True)
    assert trace.branches[0].token_ids == prompt + [*b"42", END]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prl.contracts.renderer import Rendered, Renderer, RendererConfig
from prl.types import Generation, Sampling

__all__ = ["END", "START", "ByteRenderer", "ScriptedClient", "decode_messages", "last_user"]

START, END = 256, 257


class ByteRenderer(Renderer):
    """Messages as ``START role \\n content END \\n`` in bytes; bridges turns unless told not to."""

    name = "test-bytes"

    def __init__(self, bridge: bool = True) -> None:
        super().__init__(RendererConfig(), "")
        self.bridge = bridge

    def render(self, messages, tools=None, add_generation_prompt=False) -> Rendered:
        ids: list[int] = []
        index: list[int] = []
        roles: list[str] = []
        for i, m in enumerate(messages):
            part = [START, *f"{m['role']}\n{m['content']}".encode(), END, *b"\n"]
            ids += part
            index += [i] * len(part)
            roles += [m["role"]] * len(part)
        if add_generation_prompt:
            part = [START, *b"assistant\n"]
            ids += part
            index += [-1] * len(part)
            roles += ["template"] * len(part)
        return Rendered(ids, index, roles)

    def parse_response(self, token_ids, tools=None, prompt_ids=None) -> dict[str, Any]:
        body = [t for t in token_ids if t < 256]
        return {"content": bytes(body).decode(errors="replace")}

    def get_stop_token_ids(self) -> list[int]:
        return [END]

    @property
    def is_prefix_stable(self) -> bool:
        return True

    def bridge_to_next_turn(self, prev_prompt_ids, prev_completion_ids, new_messages, tools=None):
        # Only a completion that ended on the end token leaves the sequence where the
        # template expects the next message; a cut-off one forces a re-render.
        if not self.bridge or not prev_completion_ids or prev_completion_ids[-1] != END:
            return None
        return [*b"\n", *self.render(new_messages, add_generation_prompt=True).token_ids]


def decode_messages(ids: list[int]) -> list[dict[str, str]]:
    """Inverse of :meth:`ByteRenderer.render` for complete messages (the policy's input)."""
    out, cur = [], None
    for t in ids:
        if t == START:
            cur = []
        elif t == END and cur is not None:
            role, _, content = bytes(cur).decode().partition("\n")
            out.append({"role": role, "content": content})
            cur = None
        elif cur is not None:
            cur.append(t)
    return out


class ScriptedClient:
    """Token-in/token-out client driven by ``policy(messages) -> reply text``.

    A reply longer than ``sampling.max_tokens`` is cut there with finish reason ``length``
    (and no end token), as a server would; every prompt sent is kept in ``prompts``.
    """

    LOGPROB = -0.25

    def __init__(self, policy: Callable[[list[dict[str, str]]], str], finish: str = "stop") -> None:
        self.policy = policy
        self.finish = finish
        self.prompts: list[list[int]] = []
        self.images: list[list[str]] = []

    async def generate(self, prompt_ids: list[int], sampling: Sampling, images: list[str] | None = None) -> Generation:
        self.prompts.append(list(prompt_ids))
        self.images.append(list(images or []))  # a prompt's images, one placeholder each in its ids
        text = self.policy(decode_messages(prompt_ids))
        ids = list(text.encode())
        if sampling.max_tokens is not None and len(ids) >= sampling.max_tokens:
            ids = ids[: sampling.max_tokens]
            return Generation(ids, [self.LOGPROB] * len(ids), "length")
        ids.append(END)
        return Generation(ids, [self.LOGPROB] * len(ids), self.finish)

    async def chat(self, messages, sampling):  # pragma: no cover - tasksets sample token-in/token-out
        raise NotImplementedError


def last_user(messages: list[dict[str, str]]) -> str:
    """The content of the last user message (what most scripted policies answer)."""
    return [m for m in messages if m["role"] == "user"][-1]["content"]
