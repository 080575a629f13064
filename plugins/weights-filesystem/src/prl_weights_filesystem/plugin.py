"""Registers the filesystem weight transport with prl."""

from prl import hookimpl
from prl_weights_filesystem.transport import FilesystemWeights


@hookimpl
def prl_register_weight_transports():
    return [FilesystemWeights]
