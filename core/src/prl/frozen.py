"""Frozen models: servers an algorithm reads from but never trains (teachers, samplers).

The user starts them (``prl inference @ teacher.toml``, or any server speaking the
protocol); a run only checks them once at start-up, so a teacher that is down, or one that
cannot do what the algorithm needs, ends the run with one line naming the config field and
the URL instead of leaving it waiting on a server that never answers.

Two capabilities are checked:

* **prefill scoring** (:func:`check_scoring`): ``POST /inference/v1/generate`` with
  ``max_tokens 1`` and ``prompt_logprobs`` must return one logprob per prompt token; both
  prl inference backends (torch, vLLM) serve it. opd's teacher needs it.
* **sampling** (:func:`check_completions`): the server lists the configured model name on
  ``GET /v1/models`` and answers ``POST /v1/completions`` for a token-id prompt with the
  completion's token ids; sft samples from it through :class:`CompletionsSampler`.

Torch-free (the orchestrator imports it).
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import httpx
from pydantic import Field

from prl.client import InferenceError, InferenceHTTPClient
from prl.config.base import PrlModel
from prl.config.errors import ConfigError
from prl.types import Generation, Sampling

# Token ids every vocabulary has: a prefill probe must not depend on the tokenizer.
PROBE_IDS = [1, 2, 3]


class FrozenModelConfig(PrlModel):
    """A frozen model's server: ``{name, base_url}`` (plus optional key and timeouts)."""

    name: str
    """Model name the server serves (sent as ``model`` with every request)."""
    base_url: str
    """Server address without /v1, e.g. ``http://127.0.0.1:8001``."""
    api_key: str | None = None
    """Bearer token for the server; none when unset."""
    timeout: Annotated[float, Field(gt=0)] = 600.0
    """Seconds to wait for one request."""
    startup_timeout: Annotated[float, Field(ge=0)] = 30.0
    """Seconds the start-up check retries a server that refuses connections (one still
    loading its weights) before the run stops with an error."""

    def client(self) -> InferenceHTTPClient:
        """An HTTP client bound to this server and model name."""
        return InferenceHTTPClient(self.base_url, api_key=self.api_key, model=self.name, timeout=self.timeout)

    def sampler(self) -> CompletionsSampler:
        """A client whose ``generate`` samples this model through ``/v1/completions``."""
        return CompletionsSampler(self.base_url, api_key=self.api_key, model=self.name, timeout=self.timeout)


class FrozenModelError(ConfigError):
    """A frozen model the config names is unreachable or lacks a capability (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "Frozen model error")


async def _retrying(field: str, model: FrozenModelConfig, probe):
    """Run ``probe()``; retry connection failures until ``startup_timeout`` has passed."""
    deadline = time.monotonic() + model.startup_timeout
    while True:
        try:
            return await probe()
        except InferenceError as exc:
            unreachable = isinstance(exc.__cause__, httpx.HTTPError)
            if not unreachable:
                if exc.status is None:
                    raise  # answered, but not with what was asked: the caller names it
                raise _error(field, model, exc) from None
            if time.monotonic() >= deadline:
                raise _error(field, model, exc) from None
        await asyncio.sleep(0.5)


def _error(field: str, model: FrozenModelConfig, exc: InferenceError) -> FrozenModelError:
    if exc.status is None:
        return FrozenModelError(
            f"{field}: no server answers at {model.base_url} "
            f"(start it first, e.g. `prl inference @ teacher.toml`): {exc}"
        )
    return FrozenModelError(f"{field}: the server at {model.base_url} refused the request: {exc}")


async def check_scoring(field: str, model: FrozenModelConfig) -> None:
    """Raise :class:`FrozenModelError` unless ``model`` prefill-scores with prompt logprobs."""
    async with model.client() as client:
        try:
            await _retrying(field, model, lambda: client.score(PROBE_IDS))
        except FrozenModelError as exc:
            if "HTTP 404" in exc.message:
                detail = exc.message.partition("HTTP 404: ")[2]
                raise FrozenModelError(
                    f"{field}: POST {model.base_url}/inference/v1/generate answered 404 ({detail}); check "
                    f"{field}.name ('{model.name}') and that the server is a prl inference server (torch or vllm "
                    "backend), which prefill scoring (prompt_logprobs) needs"
                ) from None
            raise
        except InferenceError as exc:
            # Answered, but without one prompt logprob per prompt token.
            raise FrozenModelError(
                f"{field}: the server at {model.base_url} returned no usable prompt_logprobs for prefill "
                f"scoring ({exc}); serve the teacher with a prl inference backend (torch or vllm)"
            ) from None


async def check_sampling(field: str, model: FrozenModelConfig) -> None:
    """Raise :class:`FrozenModelError` unless ``model``'s server is up and lists ``model.name``."""

    async def models(client: InferenceHTTPClient) -> list[str]:
        try:
            return await client.models()
        except httpx.HTTPError as exc:
            raise InferenceError(f"GET {model.base_url}/v1/models failed: {exc!r}") from exc

    async with model.client() as client:
        try:
            names = await _retrying(field, model, lambda: models(client))
        except (KeyError, TypeError, ValueError) as exc:
            raise FrozenModelError(f"{field}: GET {model.base_url}/v1/models gave no model list ({exc!r})") from None
    if model.name not in names:
        raise FrozenModelError(
            f"{field}.name: the server at {model.base_url} serves {', '.join(map(repr, names)) or 'no model'}, "
            f"not '{model.name}'"
        )


class CompletionsSampler(InferenceHTTPClient):
    """Samples a frozen model through ``POST /v1/completions`` (any OpenAI-compatible server
    that accepts a token-id prompt and returns the completion's token ids, e.g. vLLM or a
    prl inference server), answering :meth:`generate` like the policy's client does.

    The frozen model must share the student's tokenizer: its token ids become the student's
    training tokens. Logprobs are the frozen model's (0.0 when the server sends none); no
    loss reads them for ce-only tokens.
    """

    async def generate_n(self, prompt_ids: list[int], sampling: Sampling, n: int, *, model: str | None = None):
        body = await self.completions(list(prompt_ids), sampling, n=n, logprobs=0, model=model)
        return [_completion_generation(choice) for choice in body.get("choices") or []]


def _completion_generation(choice: dict) -> Generation:
    tokens = choice.get("token_ids")
    if not isinstance(tokens, list):
        raise InferenceError("the completion carries no token_ids (the server must honour return_token_ids)")
    logprobs = ((choice.get("logprobs") or {}).get("token_logprobs")) or []
    if len(logprobs) != len(tokens):
        logprobs = [0.0] * len(tokens)
    finish = choice.get("finish_reason") or "stop"
    return Generation(list(tokens), [float(x or 0.0) for x in logprobs], finish, 0)


async def check_completions(field: str, model: FrozenModelConfig) -> None:
    """Raise :class:`FrozenModelError` unless ``model`` serves its name and returns token ids
    from ``/v1/completions`` for a token-id prompt."""
    await check_sampling(field, model)
    async with model.sampler() as client:
        try:
            await client.generate(PROBE_IDS, Sampling(max_tokens=1))
        except InferenceError as exc:
            raise FrozenModelError(
                f"{field}: POST {model.base_url}/v1/completions with a token-id prompt did not give token ids: {exc}"
            ) from None
