"""Images in a rollout's conversation (``prl.tasks.Conversation``): each image part becomes
one placeholder in the rendered prompt, the images go to the server with the prompt, and the
branch takes the server's widened prompt, so it holds the ids the model saw. A later turn
on the same branch sends the widened prompt back; an environment message with an image
re-renders the conversation with every image."""

from __future__ import annotations

import asyncio

import pytest

import prl.images
from prl.tasks import Conversation
from prl.tasks.testing import END, ByteRenderer
from prl.testing.images import png_url
from prl.types import Generation, Sampling

MARK = ord("~")  # the test's one-token placeholder
WIDTH = 3  # patch tokens per image in this fake server


class WideningClient:
    """A server that widens each lone placeholder to WIDTH tokens and answers "ok"."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], list[str] | None]] = []

    async def generate(self, prompt_ids, sampling, images=None) -> Generation:
        self.calls.append((list(prompt_ids), images))
        wide: list[int] = []
        for i, t in enumerate(prompt_ids):
            alone = t == MARK and MARK not in (prompt_ids[i - 1 : i] + prompt_ids[i + 1 : i + 2])
            wide += [t] * (WIDTH if alone else 1)
        gen = Generation([*b"ok", END], [-0.5] * 3, "stop")
        gen.prompt_token_ids = wide if wide != list(prompt_ids) else None
        return gen


@pytest.fixture(autouse=True)
def one_token_placeholder(monkeypatch):
    monkeypatch.setattr(prl.images, "PLACEHOLDER", "~")


def _user(text: str, colour: str | None = None) -> dict:
    content = [{"type": "text", "text": text}]
    if colour:
        content.append({"type": "image_url", "image_url": {"url": png_url(colour, 8)}})
    return {"role": "user", "content": content}


def test_the_branch_holds_the_widened_prompt_and_later_images_re_render():
    client = WideningClient()
    conv = Conversation(ByteRenderer(), [{"role": "system", "content": "s"}, _user("Name it.", "red")])
    asyncio.run(conv.sample(client, Sampling(max_tokens=4)))
    (sent, images) = client.calls[0]
    assert images == [png_url("red", 8)] and sent.count(MARK) == 1
    (branch,) = conv.branches
    assert branch.token_ids.count(MARK) == WIDTH
    at = branch.token_ids.index(MARK)
    assert branch.roles[at : at + WIDTH] == ["user"] * WIDTH
    assert len(branch.token_ids) == len(branch.roles) == len(branch.sampled_mask) == len(branch.logprobs)
    assert branch.token_ids[-3:] == [*b"ok", END] and branch.sampled_mask[-3:] == [True] * 3
    assert not any(branch.sampled_mask[:-3])

    # a text reply bridges: the widened prompt goes back with its images, as it is
    conv.add({"role": "user", "content": "again"})
    asyncio.run(conv.sample(client, Sampling(max_tokens=4)))
    sent, images = client.calls[1]
    assert sent == branch.token_ids[:-3] and sent.count(MARK) == WIDTH
    assert images == [png_url("red", 8)] and len(conv.branches) == 1

    # a message with an image: the whole conversation is rendered again, with both images
    conv.add(_user("And this?", "blue"))
    asyncio.run(conv.sample(client, Sampling(max_tokens=4)))
    sent, images = client.calls[2]
    assert images == [png_url("red", 8), png_url("blue", 8)] and sent.count(MARK) == 2
    assert len(conv.branches) == 2 and conv.branches[1].token_ids.count(MARK) == 2 * WIDTH


def test_text_only_content_lists_reach_the_renderer_unchanged():
    client = WideningClient()
    seen = []

    class Recording(ByteRenderer):
        def render(self, messages, tools=None, add_generation_prompt=False):
            seen.append(messages)
            return super().render([{**m, "content": str(m["content"])} for m in messages], tools, add_generation_prompt)

    conv = Conversation(Recording(), [_user("plain")])
    asyncio.run(conv.sample(client, Sampling(max_tokens=4)))
    assert seen[0][0]["content"] == [{"type": "text", "text": "plain"}]
    assert client.calls[0][1] is None
