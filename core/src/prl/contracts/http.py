"""The request models and error reply of the inference HTTP contract
(``docs/inference.md``) that every backend answers the same way.

Requests follow the OpenAI schemas plus vLLM's extensions; unknown fields are ignored, as
an OpenAI-style server does, and a value out of range is a 400 whose body is
``{"error": {"message", "type", "param", "code"}}``. Backends subclass these models for
the fields only they support.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ApiError(Exception):
    """An error answered as ``{"error": {"message", "type", "param", "code"}}`` with HTTP ``status``."""

    def __init__(self, message: str, status: int = 400, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.message, self.status, self.kind = message, status, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": None, "code": self.status}}


class OpenModel(BaseModel):
    """A request body that ignores fields it does not know."""

    model_config = ConfigDict(extra="allow")


class SamplingFields(OpenModel):
    """Sampling fields every backend takes (OpenAI's plus vLLM's ``top_k``,
    ``stop_token_ids``, ``ignore_eos`` and ``prompt_logprobs``)."""

    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    seed: int | None = None
    ignore_eos: bool = False
    prompt_logprobs: int | None = None


class UpdateWeightsRequest(OpenModel):
    """``POST /update_weights``: load ``weight_dir`` and label the policy ``version``."""

    weight_dir: str | None = None
    version: int | None = None


class InitBroadcasterRequest(OpenModel):
    """``POST /init_broadcaster``: join the trainer's weight-broadcast group at ``host:port``
    as ranks ``rank_offset ..`` of ``1 + inference_world_size`` (the nccl transport)."""

    host: str = Field(min_length=1)
    port: int = Field(ge=1, le=65535)
    rank_offset: int = Field(ge=1)
    inference_world_size: int = Field(ge=1)
    timeout: float = Field(default=1200.0, gt=0)
    backend: Literal["auto", "nccl", "gloo"] = "auto"


class LoraRequest(OpenModel):
    """``POST /load_lora_adapter``."""

    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)
