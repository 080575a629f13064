"""prl weight transport over the filesystem (HF safetensors in broadcasts/step_N)."""

from prl_weights_filesystem.transport import FilesystemWeights

__all__ = ["FilesystemWeights"]
