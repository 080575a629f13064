"""A check any inference backend's tests can run: a version broadcast through the group
replaces the served weights (``/init_broadcaster`` + ``/update_weights {weight_dir: null}``).

The trainer's side runs in a thread of the test (rank 0 of a gloo group of two); the new
weights are another tiny model's. The scores the server gives a prompt before, after and
once the base weights are restored (through a directory, so a session-wide server is left
as it was) come back for the test to compare with reference forwards.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from prl.client import InferenceHTTPClient
from prl.serving import free_port


def broadcast_new_policy(
    base_url: str, model: str, api_key: str | None, base_dir: str, new_dir: str, prompt: list[int], version: int = 5
) -> dict[str, Any]:
    """Broadcast ``new_dir``'s weights as ``version``; returns the server's prompt scores
    ``before``/``after``/``restored``, the ``version`` it reports and any ``sender`` error."""
    from transformers import AutoModelForCausalLM
    from transformers.core_model_loading import revert_weight_conversion

    from prl_weights_nccl.group import join

    hf = AutoModelForCausalLM.from_pretrained(new_dir, dtype="float32")
    # What the torch trainer sends: the checkpoint layout (an MoE model's experts one by one).
    state = revert_weight_conversion(hf, hf.state_dict())
    port, sent = free_port("127.0.0.1"), {}

    def trainer() -> None:
        try:
            join("127.0.0.1", port, 0, 2, 120, "gloo").send(state, version, bucket_bytes=1 << 20)
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            sent["error"] = exc

    async def go() -> dict[str, Any]:
        async with InferenceHTTPClient(base_url, api_key=api_key, model=model, timeout=300) as c:
            out: dict[str, Any] = {"before": await c.score(prompt)}
            body = {"host": "127.0.0.1", "port": port, "rank_offset": 1, "inference_world_size": 1}
            await c.init_broadcaster({**body, "timeout": 120, "backend": "gloo"})
            thread = threading.Thread(target=trainer)
            thread.start()
            try:
                out["version"] = await c.update_weights(None, version=None)
                out["after"] = await c.score(prompt)
            finally:
                thread.join(120)
                await c.update_weights(base_dir)
                out["restored"] = await c.score(prompt)
            out["sender"] = sent.get("error")
            return out

    return asyncio.run(go())
