"""prl's embedded inference backend (``[inference.backend] type = "torch"``).

An OpenAI-compatible HTTP server over a transformers causal LM with a KV cache and
continuous batching, plus the token-in/token-out, prefill-scoring and admin routes of
``docs/inference.md``. Runs on CPU and CUDA.
"""

from prl_inference_torch.backend import TorchBackend, TorchInferenceConfig

__all__ = ["TorchBackend", "TorchInferenceConfig"]
