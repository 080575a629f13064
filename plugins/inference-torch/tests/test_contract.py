"""The shared inference contract, against the torch backend in a subprocess."""

from prl.testing.inference_contract import InferenceContract


class TestTorchBackendContract(InferenceContract):
    logprob_atol = 1e-4
