"""prl-inference-vllm: vLLM's OpenAI-compatible server with prl's token and admin routes.

Select it with ``[inference.backend] type = "vllm"``; see :mod:`prl_inference_vllm.config`
for the settings and :mod:`prl_inference_vllm.routes` for the HTTP contract.
"""

from prl_inference_vllm.backend import VllmBackend
from prl_inference_vllm.config import VllmInferenceConfig, vllm_argv

__all__ = ["VllmBackend", "VllmInferenceConfig", "vllm_argv"]
