"""Async HTTP client for a prl inference server (any backend serving ``docs/inference.md``).

Implements :class:`prl.contracts.InferenceClient` (``generate``, ``chat``) plus prefill
scoring and the admin calls the orchestrator makes around a weight update. Torch-free.

Wire format (what every backend serves; ``prl.testing.inference_contract`` checks it):

* ``POST /inference/v1/generate`` ``{"token_ids", "sampling_params": {temperature, top_p,
  top_k, max_tokens, stop, seed, n, logprobs, prompt_logprobs}, "model"?, "images"?}``
  (``images``: URLs of a vision-language prompt's images, one placeholder token each in
  ``token_ids``; the answer's ``prompt_token_ids`` is the prompt with them widened) answers
  ``{"choices": [{"token_ids", "logprobs": {"content": [{"token_id", "logprob"}]},
  "finish_reason", "weight_versions"?, "sampling_mask"?, "sampling_mask_logprobs"?,
  "routed_experts"?}], "prompt_logprobs"?, "version"?}`` (``routed_experts``: per
  completion token its MoE experts, layers x top_k ids flat; routing replay). The policy
  version is the top-level ``version`` when present, otherwise the first span of the
  choice's ``weight_versions`` (the version that sampled its first token).
* Prefill scoring is the same route with ``max_tokens 1`` and ``prompt_logprobs 0``:
  ``prompt_logprobs[i]`` maps token id (a string key in JSON) to ``{"logprob", ...}`` and is
  null for the first token.
* ``POST /update_weights {"weight_dir", "version"?}`` answers ``{"version": int}``;
  ``/pause``, ``/resume`` and ``/load_lora_adapter {lora_name, lora_path}`` answer 200.
  ``weight_dir`` null means the weights arrive through the broadcast group the server
  joined on ``POST /init_broadcaster`` (the nccl weight transport).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prl.config.sections import ClientConfig

import httpx

from prl.types import Generation, Sampling


class InferenceError(RuntimeError):
    """The server answered with an error status (or not at all)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def sampling_params(sampling: Sampling, **extra: Any) -> dict[str, Any]:
    """``Sampling`` as the JSON sampling fields of a request (unset fields left out)."""
    out: dict[str, Any] = {"temperature": sampling.temperature, "top_p": sampling.top_p}
    for key in ("top_k", "max_tokens", "stop", "seed"):
        value = getattr(sampling, key)
        if value is not None:
            out[key] = value
    out.update({k: v for k, v in extra.items() if v is not None})
    return out


def response_version(body: dict[str, Any], choice: dict[str, Any] | None = None) -> int:
    """Policy version that sampled a response (see the module docstring)."""
    if isinstance(body.get("version"), int):
        return body["version"]
    spans = (choice or {}).get("weight_versions") or []
    if spans:
        try:
            return int(spans[0]["version"])
        except (KeyError, TypeError, ValueError):
            return 0
    return 0


def choice_generation(body: dict[str, Any], choice: dict[str, Any]) -> Generation:
    tokens = list(choice.get("token_ids") or [])
    content = ((choice.get("logprobs") or {}).get("content")) or []
    logprobs = [float(entry["logprob"]) for entry in content]
    if len(logprobs) != len(tokens):
        raise InferenceError(f"server returned {len(tokens)} token ids but {len(logprobs)} logprobs")
    return Generation(
        tokens,
        logprobs,
        choice.get("finish_reason") or "stop",
        response_version(body, choice),
        sampling_mask=choice.get("sampling_mask"),
        sampling_mask_logprobs=choice.get("sampling_mask_logprobs"),
        routed_experts=choice.get("routed_experts"),
    )


# A server closes a kept-alive connection once it has sat idle past the server's keep-alive
# timeout. A request written into that connection just before (after the server was stopped
# or busy for longer than that timeout, say) gets no answer: the socket is reset or closed
# under it. Sending it again, on another connection, is what a browser does; the routes are
# idempotent (pause, resume, loading a named version) or only cost a repeated generation.
DROPPED = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
DROPPED_RETRIES = 2


# A server that did read the request before the connection dropped would be asked to join
# the weight-broadcast group twice.
NEVER_RESENT = frozenset({"/init_broadcaster"})


async def post_retrying(http: httpx.AsyncClient, url: str, body: Any, **kw: Any) -> httpx.Response:
    """``http.post(url, json=body, **kw)``, sent again up to :data:`DROPPED_RETRIES` times when
    the connection is dropped before an answer (:data:`DROPPED`); the routes in
    :data:`NEVER_RESENT` are sent once. ``url`` is a path or a whole URL."""
    retries = 0 if httpx.URL(url).path in NEVER_RESENT else DROPPED_RETRIES
    return await send_retrying(lambda: http.post(url, json=body, **kw), retries)


async def send_retrying(send: Callable[[], Awaitable[httpx.Response]], retries: int) -> httpx.Response:
    """``await send()``, called again up to ``retries`` times when the connection is dropped
    before an answer (:data:`DROPPED`); ``send`` builds a fresh request each call."""
    for attempt in range(retries + 1):
        try:
            return await send()
        except DROPPED:
            if attempt == retries:
                raise
            # let the server's closes of its other idle connections reach the pool first
            await asyncio.sleep(0.1 * (attempt + 1))
    raise AssertionError("unreachable")


class InferenceHTTPClient:
    """One server's routes over a shared ``httpx.AsyncClient``."""

    def __init__(
        self, base_url: str, *, api_key: str | None = None, model: str | None = None, timeout: float = 600.0
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        key = api_key or os.environ.get("PRL_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=timeout,
            headers=headers,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
        )
        # Request counters for the orchestrator's time-keyed ``inference/*`` rows.
        self.in_flight = 0
        self.requests = 0
        self.request_seconds = 0.0

    @classmethod
    def from_config(cls, config: ClientConfig, model: str | None = None) -> InferenceHTTPClient:
        """From a ``ClientConfig`` (``base_url``, ``api_key``, ``timeout``)."""
        return cls(config.base_url, api_key=config.api_key, model=model, timeout=config.timeout)

    async def __aenter__(self) -> InferenceHTTPClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body``; a connection the server dropped before answering is retried (see
        :func:`post_retrying`)."""
        self.in_flight += 1
        started = time.monotonic()
        try:
            resp = await post_retrying(self._http, path, body)
        except httpx.HTTPError as exc:
            raise InferenceError(f"POST {self.base_url}{path} failed: {exc!r}") from exc
        finally:
            self.in_flight -= 1
            self.requests += 1
            self.request_seconds += time.monotonic() - started
        return _checked(resp, "POST", path)

    # ----- sampling ---------------------------------------------------------------------
    async def generate(
        self, prompt_ids: list[int], sampling: Sampling, *, model: str | None = None, images: list[str] | None = None
    ) -> Generation:
        """Token-in/token-out sampling with the logprob of every sampled token (``images``:
        see :meth:`prl.contracts.inference.InferenceClient.generate`)."""
        # images only when there are some: a subclass serving text (prl.frozen's completions
        # sampler) keeps generate_n's text signature
        extra = {"images": images} if images else {}
        return (await self.generate_n(prompt_ids, sampling, 1, model=model, **extra))[0]

    async def generate_n(
        self,
        prompt_ids: list[int],
        sampling: Sampling,
        n: int,
        *,
        model: str | None = None,
        images: list[str] | None = None,
    ) -> list[Generation]:
        """``n`` completions of one prompt, prefilled once on the server."""
        request = {
            "token_ids": list(prompt_ids),
            "model": model or self.model,
            "sampling_params": sampling_params(sampling, n=n, logprobs=0),
        }
        if images:
            request["images"] = list(images)
        body = await self._post("/inference/v1/generate", request)
        gens = [choice_generation(body, c) for c in body["choices"]]
        widened = body.get("prompt_token_ids")
        if images and widened is not None and list(widened) != list(prompt_ids):
            for gen in gens:
                gen.prompt_token_ids = list(widened)
        return gens

    async def score(self, token_ids: list[int], *, model: str | None = None) -> list[float | None]:
        """Prefill scoring: logprob of every token given the ones before it (None for the first)."""
        body = await self._post(
            "/inference/v1/generate",
            {
                "token_ids": list(token_ids),
                "model": model or self.model,
                "sampling_params": {"max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0},
            },
        )
        entries = body.get("prompt_logprobs")
        if entries is None or len(entries) != len(token_ids):
            raise InferenceError("server did not return one prompt logprob per prompt token")
        out: list[float | None] = []
        for tok, entry in zip(token_ids, entries, strict=False):
            if entry is None:
                out.append(None)
                continue
            hit = entry.get(str(tok), entry.get(tok))  # type: ignore[call-overload]
            if hit is None:
                raise InferenceError(f"prompt_logprobs lacks the prompt's own token {tok}")
            out.append(float(hit["logprob"] if isinstance(hit, dict) else hit))
        return out

    async def chat(self, messages: list[dict], sampling: Sampling, **extra: Any) -> dict[str, Any]:
        """OpenAI chat completion; ``extra`` fields (n, logprobs, tools, ...) pass through."""
        body = {
            "model": extra.pop("model", None) or self.model,
            "messages": messages,
            **sampling_params(sampling),
            "return_token_ids": True,
            **extra,
        }
        return await self._post("/v1/chat/completions", {k: v for k, v in body.items() if v is not None})

    async def completions(self, prompt: str | list[int], sampling: Sampling, **extra: Any) -> dict[str, Any]:
        body = {
            "model": extra.pop("model", None) or self.model,
            "prompt": prompt,
            **sampling_params(sampling),
            "return_token_ids": True,
            **extra,
        }
        return await self._post("/v1/completions", {k: v for k, v in body.items() if v is not None})

    # ----- status and admin -------------------------------------------------------------
    async def health(self) -> bool:
        try:
            return (await self._http.get("/health", timeout=5.0)).status_code == 200
        except httpx.HTTPError:
            return False

    async def reachable(self) -> bool:
        """Whether a server listens at ``base_url``, whatever it answers (servers differ in
        which paths they serve): False only when no connection can be made. A server that
        accepts the connection but is slow to answer is there, only busy."""
        try:
            await self._http.get("/health", timeout=10.0)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol):
            return False
        except httpx.HTTPError:
            return True
        return True

    async def wait_ready(self, timeout: float = 300.0, interval: float = 0.5) -> None:
        """Wait until ``GET /health`` answers 200; TimeoutError names the server and last error."""
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            try:
                resp = await self._http.get("/health", timeout=min(5.0, timeout))
                if resp.status_code == 200:
                    return
                last = f"HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                last = repr(exc)
            await asyncio.sleep(interval)
        raise TimeoutError(
            f"waited {timeout:g}s for the inference server at {self.base_url} to answer "
            f"GET /health with 200 (last: {last})"
        )

    async def models(self) -> list[str]:
        resp = await self._http.get("/v1/models")
        return [m["id"] for m in _checked(resp, "GET", "/v1/models")["data"]]

    async def update_weights(self, weight_dir: str | None, version: int | None = None) -> int:
        """Load a new policy; returns the version the server now serves."""
        body = await self._post("/update_weights", {"weight_dir": weight_dir, "version": version})
        got = body.get("version", version)
        if not isinstance(got, int):
            raise InferenceError("server did not say which version it now serves")
        return got

    async def init_broadcaster(self, body: dict[str, Any]) -> None:
        """Ask the server to join the trainer's weight-broadcast group (``host``, ``port``,
        ``rank_offset``, ``inference_world_size``, ``timeout``, ``backend``); it answers at once
        and joins in the background."""
        await self._post("/init_broadcaster", body)  # sent once: see NEVER_RESENT

    async def load_lora_adapter(self, lora_name: str, lora_path: str) -> None:
        await self._post("/load_lora_adapter", {"lora_name": lora_name, "lora_path": lora_path})

    async def pause(self) -> None:
        await self._post("/pause", {})

    async def resume(self) -> None:
        await self._post("/resume", {})


def _checked(resp: httpx.Response, method: str, path: str) -> dict[str, Any]:
    try:
        body = resp.json()
    except ValueError:
        body = None
    if resp.status_code >= 400:
        err = body.get("error") if isinstance(body, dict) else None
        msg = err.get("message") if isinstance(err, dict) else (err or resp.text[:300])
        raise InferenceError(f"{method} {path} -> HTTP {resp.status_code}: {msg}", resp.status_code)
    if not isinstance(body, dict):
        raise InferenceError(f"{method} {path} -> HTTP {resp.status_code} with a non-JSON body")
    return body
