"""Entry point of prl-inference-torch: registers the ``torch`` inference backend."""

from prl import hookimpl


@hookimpl
def prl_register_inference_backends():
    from prl_inference_torch.backend import TorchBackend

    return [TorchBackend]
