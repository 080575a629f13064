"""The request models and error reply of the inference HTTP contract
(``docs/inference.md``) that every backend answers the same way.

Requests follow the OpenAI schemas plus vLLM's extensions; unknown fields are ignored, as
an OpenAI-style server does, and a value out of range is a 400 whose body is
``{"error": {"message", "type", "param", "code"}}``. Backends subclass these models for
the fields only they support.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ApiError(Exception):
    """An error answered as ``{"error": {"message", "type", "param", "code"}}`` with HTTP ``status``."""

    def __init__(self, message: str, status: int = 400, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.message, self.status, self.kind = message, status, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": None, "code": self.status}}


class ErrorDetail(BaseModel):
    message: str = Field(min_length=1)
    type: str
    param: str | None = None
    code: int


class ErrorBody(BaseModel):
    """The body of every 4xx/5xx answer (:meth:`ApiError.body`), as the OpenAPI documents
    declare it."""

    error: ErrorDetail


class OpenModel(BaseModel):
    """A request body that ignores fields it does not know."""

    # Strict, as the OpenAPI document reads: a JSON 0 is not false and "1" is not 1. JSON
    # Schema's integer is a number without a fraction, so 2.0 is one: see _integral.
    model_config = ConfigDict(extra="allow", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _integral(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {key: _int_if_integral(value) for key, value in data.items()}


def _int_if_integral(value: Any) -> Any:
    """2.0 -> 2 (in lists too: token ids); dicts are nested models with their own pass."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_int_if_integral(v) for v in value]
    return value


class SamplingFields(OpenModel):
    """Sampling fields every backend takes (OpenAI's plus vLLM's ``top_k``,
    ``stop_token_ids``, ``ignore_eos`` and ``prompt_logprobs``)."""

    # The bounds are validated here and published in the OpenAPI document, so a request
    # the schema calls valid is one the server accepts (checks against the model's context
    # and the server's limits come after).
    n: int = Field(default=1, ge=1)
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)
    max_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    stop_token_ids: list[Annotated[int, Field(ge=0)]] | None = None
    # Within a torch generator's range, and exact as a JSON double so a bound is not rounded.
    seed: int | None = Field(default=None, ge=-(2**53), le=2**53)
    ignore_eos: bool = False
    prompt_logprobs: int | None = Field(default=None, ge=0)


class UpdateWeightsRequest(OpenModel):
    """``POST /update_weights``: load ``weight_dir`` and label the policy ``version``."""

    weight_dir: str | None = None
    version: int | None = None


class InitBroadcasterRequest(OpenModel):
    """``POST /init_broadcaster``: join the trainer's weight-broadcast group at ``host:port``
    as ranks ``rank_offset ..`` of ``1 + inference_world_size`` (an in-band transport, nccl)."""

    host: str = Field(min_length=1)
    port: int = Field(ge=1, le=65535)
    # Bounds a process group and a TCPStore accept (C ints, a timedelta).
    rank_offset: int = Field(ge=1, le=2**20)
    inference_world_size: int = Field(ge=1, le=2**20)
    timeout: float = Field(default=1200.0, gt=0, le=7 * 24 * 3600)
    backend: Literal["auto", "nccl", "gloo"] = "auto"


class LoraRequest(OpenModel):
    """``POST /load_lora_adapter``."""

    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)
