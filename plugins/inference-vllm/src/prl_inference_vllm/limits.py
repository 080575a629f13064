"""``server.limits`` on the vLLM backend (see :mod:`prl.serving_limits`).

``n``, ``max_tokens`` and the number of prompts are checked on the raw request, before vLLM
renders anything. The prompt-token limit and the token budget need the rendered prompt, which
only exists inside vLLM's handlers, so they are applied where every route meets the engine:
the engine client's ``generate``, wrapped here. Each call is counted as
``n x (prompt + max_tokens)`` for as long as its output stream is open. A limit error raised
there is a :class:`LimitError`, which prl's routes answer with its status and which vLLM's own
handlers (a stream already started, say) map to the same status through
``GracefulHTTPError``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from prl.contracts.http import ApiError
from prl.serving_limits import TokenBudget, check_request, request_tokens

if TYPE_CHECKING:  # annotations only
    from vllm.config import ModelConfig

try:
    from vllm.exceptions import GracefulHTTPError
except ImportError:  # config checks run without vLLM installed
    GracefulHTTPError = Exception  # type: ignore[assignment,misc]


class LimitError(ApiError, GracefulHTTPError):
    """An :class:`ApiError` vLLM's handlers also answer with its own status."""

    def __init__(self, error: ApiError) -> None:
        Exception.__init__(self, error.message)
        self.message, self.status, self.kind = error.message, error.status, error.kind
        self.http_status = HTTPStatus(error.status)


def check_openai_body(limits: Any, raw: dict[str, Any]) -> None:
    """Checks of a chat/completions body that need no tokenizer (400 naming the setting);
    a body naming no max_tokens gets the limit, when there is one."""
    n = raw.get("n", 1)
    prompt = raw.get("prompt")
    prompts = 1
    if isinstance(prompt, list) and prompt and not all(isinstance(p, int) for p in prompt):
        prompts = len(prompt)
    want, name = raw.get("max_completion_tokens"), "max_completion_tokens"
    if want is None:
        want, name = raw.get("max_tokens"), "max_tokens"
    # Wrong types are left to vLLM's request model, which names the field.
    if isinstance(n, int) and isinstance(want, int | None) and not isinstance(n, bool):
        check_request(limits, n=n, prompt_lens=[0] * prompts, max_tokens=want, field=name)
    if want is None and limits.max_tokens is not None:
        raw["max_tokens"] = limits.max_tokens  # vLLM clamps it to the room left in the context


def _prompt_len(model_config: ModelConfig, prompt: Any) -> int:
    ids = getattr(prompt, "prompt_token_ids", None)
    if ids is not None:
        return len(ids)
    if isinstance(prompt, dict):
        try:
            from vllm.renderers.inputs.preprocess import extract_prompt_len

            return int(extract_prompt_len(model_config, prompt))
        except Exception:  # an input form this helper does not know: fall back to its token ids
            return len(prompt.get("prompt_token_ids") or [])
    return 0


def limit_engine(engine: Any, limits: Any, budget: TokenBudget, max_model_len: int) -> None:
    """Make every ``engine.generate`` call check the prompt length and hold the token budget."""
    inner = engine.generate

    def generate(prompt: Any, sampling_params: Any, request_id: str, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        return _limited(inner(prompt, sampling_params, request_id, *args, **kwargs), prompt, sampling_params)

    async def _limited(stream: AsyncIterator[Any], prompt: Any, params: Any) -> AsyncIterator[Any]:
        length = _prompt_len(engine.model_config, prompt)
        n = getattr(params, "n", 1) or 1
        max_tokens = getattr(params, "max_tokens", None)
        try:
            check_request(limits, n=n, prompt_lens=[length], max_tokens=None)
            await budget.acquire(request_tokens(n, length, max_tokens, max_model_len))
        except ApiError as exc:
            await stream.aclose()  # never started: nothing was sent to the engine
            raise LimitError(exc) from None
        try:
            async for out in stream:
                yield out
        finally:
            budget.release(request_tokens(n, length, max_tokens, max_model_len))

    engine.generate = generate
