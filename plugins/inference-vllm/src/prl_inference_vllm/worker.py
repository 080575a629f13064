"""Worker-side weight reload, run in every vLLM worker through ``collective_rpc``: from a
directory (``prl_reload_weights``) or from the trainer's broadcast group
(``prl_init_broadcaster`` once, then ``prl_receive_weights`` per version).

vLLM's in-place ``reload_weights`` streams a checkpoint through the model's own
``load_weights`` and re-runs each layer's post-load processing. Two things it leaves stale,
found by comparing logprobs against a transformers forward of the new weights:

* a tied output head (``tie_word_embeddings``): the reload gives ``embed_tokens`` fresh
  weight storage while ``lm_head.weight`` still points at the old tensor, so the model
  would embed with the new policy and score with the old one;
* on CPU, embedding-type layers keep a pre-packed GEMM copy of their weight
  (``process_weights_after_loading``), which is not rebuilt for the head;
* on CPU, an MoE layer's experts are pre-packed into the CPU grouped-GEMM layout once, at
  the first load: a reload writes the new experts in the checkpoint's plain layout into
  the packed parameters and skips the packing (vLLM treats it as a weight update), so the
  kernel would read unpacked weights as packed ones (a model that is neither policy).

So after the reload the head is re-tied, every unquantized embedding-type layer
(including the head) is re-processed, and on CPU every MoE layer's experts are packed
again. All three steps are no-ops where nothing is stale (untied heads, dense models, GPU
platforms).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only
    from transformers import PretrainedConfig


class PrlWorkerExtension:
    """Mixed into vLLM's worker class (``--worker-extension-cls``)."""

    def prl_reload_weights(self, weights_path: str) -> None:
        self.reload_weights(weights_path=weights_path)  # type: ignore[attr-defined]
        self._prl_retie()

    def prl_init_broadcaster(
        self, host: str, port: int, rank_offset: int, world_size: int, timeout: float, backend: str
    ) -> None:
        """Start joining the trainer's broadcast group as rank ``rank_offset`` + this
        worker's rank (in the background: the trainer forms the group on its first publish)."""
        from prl.contracts.broadcast import broadcast_join

        self._prl_join = broadcast_join()
        rank = rank_offset + int(getattr(self, "rank", 0))
        self._prl_join.start(host, port, rank, world_size, timeout, backend)

    def prl_broadcast_joined(self) -> bool:
        """Whether the join has finished (joined or failed). The server polls this before
        ``prl_receive_weights``, which would otherwise block this worker until the trainer
        forms the group, past any HTTP timeout."""
        join = getattr(self, "_prl_join", None)
        return join is not None and join.done()

    def prl_receive_weights(self) -> int:
        """Receive one version from the group and load it in place. The whole broadcast is
        taken before loading, so a load error never leaves the trainer mid-send."""
        pairs: list = []
        version = self._prl_join.group().receive(pairs.extend)
        self.reload_weights(weights_iterator=iter(pairs))  # type: ignore[attr-defined]
        self._prl_retie()
        return version

    def _prl_retie(self) -> None:
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        retie_and_repack(model, self.model_runner.model_config.hf_config)  # type: ignore[attr-defined]


def retie_and_repack(model: Any, hf_config: PretrainedConfig) -> None:
    from vllm.model_executor.layers.vocab_parallel_embedding import (
        UnquantizedEmbeddingMethod,
        VocabParallelEmbedding,
    )

    text_config = getattr(hf_config, "get_text_config", lambda: hf_config)()
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    tied = bool(getattr(text_config, "tie_word_embeddings", False) or getattr(hf_config, "tie_word_embeddings", False))
    if tied and head is not None and embed is not None and head.weight is not embed.weight:
        head.weight = embed.weight
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        if isinstance(module, VocabParallelEmbedding) and isinstance(method, UnquantizedEmbeddingMethod):
            method.process_weights_after_loading(module)
    repack_cpu_experts(model)


def repack_cpu_experts(model: Any) -> None:
    """On CPU, pack every MoE layer's freshly loaded experts into the kernel's layout (what
    the first load did; see the module docstring)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    for module in model.modules():
        kernel = getattr(getattr(module, "quant_method", None), "moe_kernel", None)
        experts = getattr(kernel, "fused_experts", None)
        if experts is not None:
            experts.process_weights_after_loading(module)
