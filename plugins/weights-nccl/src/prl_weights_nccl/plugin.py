"""Registers the nccl weight transport with prl."""

from prl import hookimpl
from prl_weights_nccl.transport import NcclWeights


@hookimpl
def prl_register_weight_transports():
    return [NcclWeights]
