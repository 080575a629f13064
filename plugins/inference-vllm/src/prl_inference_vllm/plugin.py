"""Entry point of prl-inference-vllm: registers the ``vllm`` inference backend."""

from prl import hookimpl


@hookimpl
def prl_register_inference_backends():
    # backend.py imports no vLLM at module level: registering costs nothing on nodes without it.
    from prl_inference_vllm.backend import VllmBackend

    return [VllmBackend]
