"""Inference backend contract and the client protocol tasksets use."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Protocol

from prl.config.base import PluginConfigBase, PrlModel
from prl.contracts.base import Plugin
from prl.types import Generation, Sampling

# Root configs are typed by their common base here: the root config modules compose plugin
# unions from the registry, which imports these contracts, so naming them (even for type
# checking only) would close an import circle.


class InferenceBackendConfig(PluginConfigBase):
    """Base of ``[inference.backend]`` variants."""

    returns_sampling_masks: ClassVar[bool] = False
    """True when ``/inference/v1/generate`` returns, for truncated sampling (top_p < 1 or
    top_k), each token's kept ids and their logprobs (``sampling_mask``,
    ``sampling_mask_logprobs``); a loss that reads them is refused at config time with a
    backend that does not."""

    returns_routed_experts: ClassVar[bool] = False
    """True when the backend can return, per completion token of an MoE model, the experts
    its routers chose (``routed_experts``: layers x top_k ids, flat, from the forward that
    predicted the token). Such a backend has a bool field ``return_routed_experts``, which
    ``prl rl`` turns on when the trainer replays the routing
    (``TrainerModelConfig.replays_routing``); routing replay with a backend that cannot is
    refused at config time."""

    has_section: ClassVar[bool] = False
    """True when the backend also reads ``[inference.<type>]``: its engine's own argument
    names, as the reference spells them (``[inference.vllm] max_num_seqs = 256``)."""

    @classmethod
    def absorb_section(cls, section: dict[str, Any], inference: dict[str, Any]) -> dict[str, Any]:
        """Fold ``[inference.<type>]`` into the raw ``[inference]`` table (whose ``backend``
        already selects this type) and return it: engine arguments become typed fields or
        pass-through ones. Runs before validation; raise ValueError naming a key it rejects.
        Only called when ``has_section`` is true."""
        raise NotImplementedError(f"{cls.__qualname__} reads no [inference.<type>] section")

    def worker_count(self) -> int:
        """Engine worker processes of one server (each joins a weight-broadcast group as
        its own rank): 1 unless the backend shards the model over several."""
        return 1

    def build(self, *, inference: PrlModel) -> InferenceBackend:
        """The backend this config selects. It serves the whole resolved ``inference``
        config (a :class:`prl.config.components.InferenceConfig`: model, tokenizer, server
        and this backend section)."""
        if getattr(inference, "backend", None) is not self:
            raise ValueError("build(inference=...) takes the InferenceConfig this backend section belongs to")
        return self.plugin_class()(inference)


class InferenceBackend(Plugin, ABC):
    """Serves the inference HTTP API (OpenAI chat/completions, token-in/token-out generate,
    health, models, update_weights, load_lora_adapter) until stopped."""

    type: ClassVar[str]
    Config: ClassVar[type[InferenceBackendConfig]] = InferenceBackendConfig

    def __init__(self, config: PrlModel) -> None:
        """``config`` is the whole resolved :class:`prl.config.components.InferenceConfig`
        (model, tokenizer, server, backend)."""
        self.config = config

    @abstractmethod
    def serve(self) -> None:
        """Bind ``config.server.host:port`` and serve until SIGTERM/SIGINT.

        Set up logging from ``config.log`` first (:func:`prl.logs.setup_logging`), and once
        serving write the base URL to the ready file (:func:`prl.serving.announce` with
        :func:`prl.serving.ready_file`): launchers wait for it. Weight updates arrive
        through ``/update_weights`` (``docs/plugin-contracts.md``)."""


class InferenceClient(Protocol):
    """What a taskset sees of the inference server during a rollout."""

    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        """Token-in/token-out sampling with per-token logprobs.

        A prompt with images is sent as ``generate(prompt_ids, sampling, images=refs)``:
        ``prompt_ids`` hold one image placeholder token per image and ``refs`` the images
        (``data:`` or ``http(s)://`` URLs) in order; the returned generation's
        ``prompt_token_ids`` is the prompt with each placeholder widened to the image's
        patch tokens. Only a client of a server that takes images needs the keyword
        (:class:`prl.client.InferenceClient` does)."""
        ...

    async def chat(self, messages: list[dict], sampling: Sampling) -> dict[str, Any]:
        """OpenAI-style chat completion (frozen models, evals)."""
        ...
