"""The shared inference contract (prl.testing.inference_contract) against a real vLLM server."""

from __future__ import annotations

import pytest

from prl.testing.inference_contract import InferenceContract

pytestmark = pytest.mark.vllm


class TestVllmContract(InferenceContract):
    # float32 weights on CPU; vLLM's kernels differ from transformers' only in rounding.
    logprob_atol = 2e-3
    supports_lora = True
