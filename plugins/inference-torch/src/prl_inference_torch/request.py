"""What a generate request asks for and what the engine fills in: ``GenParams`` (validated by
the HTTP layer), one ``Completion`` per sample, and the ``Request`` the engine thread serves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from prl.images import PixelInputs
from prl_inference_torch.sampling import RowSampling


@dataclass
class GenParams:
    """Sampling parameters of one request, validated by the HTTP layer."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    n: int = 1
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    sampling_mask: bool = True  # record each truncated token's kept ids
    mask_cap: int = 0  # keep at most this many ids of the top_p nucleus (0: no cap)


@dataclass
class Completion:
    """One of the ``n`` completions of a request, filled in by the engine thread."""

    index: int
    sampling: RowSampling
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    versions: list[list[int]] = field(default_factory=list)  # [version, start, end)
    sampling_mask: list[list[int]] = field(default_factory=list)  # ids top-k/top-p left, per token
    sampling_mask_logprobs: list[list[float]] = field(default_factory=list)  # their untruncated logprobs
    # per token, the experts (layers x top_k, flat) its prediction was routed to (routes.py)
    routed_experts: list[list[int]] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class Request:
    """A submitted prompt; ``wake`` is called (from the engine thread) after every change."""

    def __init__(
        self,
        prompt_ids: list[int],
        params: GenParams,
        adapter: str | None = None,
        wake: Callable[[], None] = lambda: None,
        pixels: PixelInputs | None = None,
    ) -> None:
        self.prompt_ids = prompt_ids
        self.pixels = pixels  # the prompt's images (a vision-language model), prl.images
        # where its 3-D rotary positions run behind its token count after an image (vision.py)
        self.rope_delta = 0
        self.params = params
        self.adapter = adapter
        self.wake = wake
        self.cancelled = False
        self.error: str | None = None
        self.prompt_logprobs: list[dict[int, tuple[float, int]] | None] | None = None
        self.version: int | None = None
        self.completions = [
            Completion(
                i,
                RowSampling(
                    params.temperature, params.top_p, params.top_k, None, params.sampling_mask, params.mask_cap
                ),
            )
            for i in range(params.n)
        ]

    def seed_rows(self, device: torch.device) -> None:
        """Give each completion of a seeded request its own generator (seed + index) on ``device``."""
        if self.params.seed is not None:
            for comp in self.completions:
                comp.sampling.generator = torch.Generator(device=device).manual_seed(self.params.seed + comp.index)

    @property
    def done(self) -> bool:
        return self.error is not None or all(c.finish_reason for c in self.completions)
