"""Image parts in ``/v1/chat/completions``: the torch engine serves text, so a chat message
with an image is refused in one line naming the part (400), instead of rendering an image
placeholder with no pixels behind it and answering as if nothing had been shown. Text parts
alone still work."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.slow

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


def _chat(server, content) -> httpx.Response:
    body = {"messages": [{"role": "system", "content": "Answer."}, {"role": "user", "content": content}]}
    return httpx.post(f"{server.base_url}/v1/chat/completions", json={**body, "max_tokens": 2}, timeout=60)


@pytest.mark.parametrize("part", [IMAGE, {"type": "image", "image": "shape.png"}])
def test_an_image_part_is_a_one_line_400(inference_server, part):
    res = _chat(inference_server, [{"type": "text", "text": "What colour?"}, part])
    assert res.status_code == 400
    message = res.json()["error"]["message"]
    assert message.startswith("messages[1].content[1]: image input is not supported by the torch engine yet")
    assert "\n" not in message


def test_text_parts_still_work(inference_server):
    res = _chat(inference_server, [{"type": "text", "text": "What colour?"}])
    assert res.status_code == 200, res.text
    assert res.json()["choices"][0]["finish_reason"] in ("length", "stop")
