"""prl weight transport over a torch.distributed broadcast group (NCCL, or gloo on CPU)."""

from prl_weights_nccl.transport import NcclWeights

__all__ = ["NcclWeights"]
