"""What the SFT and RL runs of this trainer share: the run directory, sums across ranks,
and handing the weights to inference (RL every step, SFT for online evals)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as tdist

from prl_trainer_torch.lora import adapter_tensors

if TYPE_CHECKING:  # annotations only
    from prl.config.components import TrainerConfig
    from prl.config.roots import SFTConfig


def run_dir_of(config: TrainerConfig | SFTConfig) -> Path:
    """The run directory the launcher made (core fills ``run.name`` before the trainer starts)."""
    name = config.run.dir or config.run.name
    if not name:
        raise ValueError("run.name: the run has no name (core fills it before calling the trainer)")
    return Path(config.output_dir) / name


def all_sum(values: list[float], dist) -> list[float]:
    """``values`` summed over the ranks (float64, so step sums of token counts stay exact)."""
    if dist.world == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=dist.device)
    tdist.all_reduce(t)
    return t.tolist()


def full_state_dict(hf) -> dict[str, torch.Tensor]:
    """Unsharded CPU weights under HF names (collective; only rank 0 gets tensors)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(hf, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def checkpoint_layout(hf, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` under the names and shapes ``save_pretrained`` writes: transformers keeps
    an MoE layer's experts as fused 3-D tensors in memory, and files (and vLLM, and any
    other reader of HF checkpoints) hold one 2-D weight per expert. The experts are copied
    while split; a dense model's tensors pass through as they are."""
    from transformers.core_model_loading import revert_weight_conversion

    return revert_weight_conversion(hf, state)


def publish_weights(hf, transport, dist, version: int, adapter=None) -> float:
    """Publish the full weights as ``version`` through ``transport`` (collective: every rank
    gathers, rank 0 publishes them in the checkpoint layout, :func:`checkpoint_layout`, and
    waits for the consumer's acknowledgement); returns the seconds taken. RL and SFT with
    online eval both hand weights over this way. A LoRA run (``adapter``,
    :class:`prl_trainer_torch.lora.Adapter`) publishes only the adapter."""
    t0 = time.perf_counter()
    if adapter is not None:
        tensors = adapter_tensors(hf)
        if dist.is_main:
            transport.publish_adapter(tensors, adapter.config, version)
        if dist.world > 1:
            tdist.barrier()
        return time.perf_counter() - t0
    if dist.world == 1 and getattr(transport, "device_tensors", False):
        state = hf.state_dict()  # no CPU round trip: the transport sends from the device
    else:
        state = full_state_dict(hf)
    if dist.is_main:
        transport.publish(checkpoint_layout(hf, state), version)
    if dist.world > 1:
        # Other ranks must not run ahead (into a batch or step the consumer has not caught up with).
        tdist.barrier()
    return time.perf_counter() - t0
