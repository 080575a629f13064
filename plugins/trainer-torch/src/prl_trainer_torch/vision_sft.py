"""``prl sft`` with ``[model.vlm]``: the SFT loop of :mod:`prl_trainer_torch.sft` on the whole
image-text model, with images read from the dataset's rows.

What differs from a text run, and why:

* The model is the conditional-generation class with its vision tower
  (:func:`~prl_trainer_torch.vision_policy.load_vision_model`, tower frozen unless
  ``freeze_vision_encoder = false``), so a checkpoint and its export keep the tower.
* Rows go through :class:`~prl_trainer_torch.vision_rows.VisionRowRenderer`: image parts
  become image tokens (never trained) and pixels. A row whose image cannot be read, or
  whose image tokens do not fit ``data.seq_len``, is skipped and counted; the count is
  logged once per epoch.
* Every sample is a micro-batch row of its own (no packing): the Qwen-VL forward places
  image features and 3-D rotary positions per sequence. Rendering stays in the trainer's
  process (``data.num_workers`` is not used), so the skipped-row count is complete.
* No per-layer compile: the vision forward's shapes change with every image grid.

Run as ``python -m prl_trainer_torch.vision_sft <resolved sft.json>`` (what torchrun starts).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from prl.config.errors import DataError
from prl_trainer_torch import checkpoint as ckpt
from prl_trainer_torch.common import run_dir_of
from prl_trainer_torch.data import PackedRow, load_dataset_rows, pack
from prl_trainer_torch.device_rows import DeviceRow
from prl_trainer_torch.entry import rank_main, run_here
from prl_trainer_torch.loader import SampleSource, SFTLoader
from prl_trainer_torch.metrics import Progress, peak_flops
from prl_trainer_torch.model import (
    GarbageCollector,
    apply_runtime_knobs,
    count_params,
    decoder_layers,
    init_distributed,
    resolve_dtype,
)
from prl_trainer_torch.optim import build_optimizer, build_scheduler
from prl_trainer_torch.sft import SFT_WEIGHT_DECAY, SFTRun
from prl_trainer_torch.vision_inputs import vision_tower
from prl_trainer_torch.vision_policy import VisionPolicy, load_vision_model
from prl_trainer_torch.vision_rows import VisionRowRenderer, VisionSample

if TYPE_CHECKING:  # annotations only
    from prl.config.roots import SFTConfig

log = logging.getLogger("prl.trainer")


@dataclass
class VisionRow(PackedRow):
    """A micro-batch row holding one sample and the pixels of its images (None: text only)."""

    pixels: Any = None


def one_per_row(samples: Iterator[VisionSample], length: int) -> Iterator[VisionRow]:
    """Each sample as a row of its own, padded to ``length`` like a packed row."""
    for s in samples:
        row = next(pack(iter([s]), length))
        yield VisionRow(**vars(row), pixels=getattr(s, "pixels", None))


def _base_dir(data_cfg: Any) -> Path | None:
    """Where relative image paths in a local dataset are read from: the dataset's folder."""
    path = Path(data_cfg.name)
    if path.is_file():
        return path.parent.resolve()
    return path.resolve() if path.is_dir() else None


class VisionSampleSource(SampleSource):
    """:class:`SampleSource` whose rows may carry images (``[model.vlm]`` runs). Fake data
    (``data.type = "fake"``) stays random text documents, without images."""

    def __init__(self, data_cfg: Any, renderer_cfg: Any, tokenizer: str, vocab: int, vlm: Any) -> None:
        if data_cfg.type == "fake":
            super().__init__(data_cfg, renderer_cfg, tokenizer, vocab)
        else:
            self.cfg, self.vocab = data_cfg, vocab
            self.rows = load_dataset_rows(data_cfg)
            self.renderer = VisionRowRenderer(data_cfg, renderer_cfg, tokenizer, vlm, _base_dir(data_cfg))
        self.args = (data_cfg, renderer_cfg, tokenizer, vocab, vlm)

    def skipped(self) -> str | None:
        """One line on the rows skipped for their images so far this epoch, or None."""
        return self.renderer.skipped.summary() if self.rows is not None else None

    def epoch(self, epoch: int, workers: int = 0) -> Iterator[VisionSample]:
        yield from super().epoch(epoch, 0)
        summary = self.skipped()
        if summary is not None:
            log.warning("epoch %d: %s", epoch, summary)
            self.renderer.skipped = type(self.renderer.skipped)()


class VisionLoader(SFTLoader):
    """:class:`SFTLoader` with one sample per row (see the module docstring)."""

    def _stream(self) -> Iterator[PackedRow]:
        it = one_per_row(self.source.epoch(self.epoch), self.row_len)
        for _ in range(self.rows):
            next(it)
        return it

    def steps_per_epoch(self) -> int:
        n = sum(1 for _ in self.source.epoch(0))
        return n // self.rows_per_step


def parallelize_vision(hf: nn.Module, dist: Any, mcfg: Any) -> VisionPolicy:
    """Move to the device, checkpoint activations when asked, and with several ranks shard
    every vision block and decoder layer, then the rest, with FSDP2."""
    hf.to(dist.device)
    if mcfg.activation_checkpointing:
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy = VisionPolicy(hf)
    policy.routing = None  # SFTRun's metrics ask; no MoE routing statistics here
    if dist.world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(dist.device.type, (dist.world,))
        mp = MixedPrecisionPolicy(reduce_dtype=torch.float32)
        blocks = list(getattr(vision_tower(hf), "blocks", []))
        for block in [*blocks, *decoder_layers(hf)]:
            fully_shard(block, mesh=mesh, mp_policy=mp)
        fully_shard(policy, mesh=mesh, mp_policy=mp)
    return policy


class VisionSFTRun(SFTRun):
    """One ``[model.vlm]`` SFT run on this rank; steps, checkpoints, validation and metrics
    are :class:`SFTRun`'s, only the model, the data and the forward differ."""

    def __init__(self, config: SFTConfig) -> None:
        self.config = config
        self.dist = init_distributed()
        torch.manual_seed(config.seed)
        self.run_dir = run_dir_of(config)
        self.ckpt_root = ckpt.ckpt_root(config, self.run_dir)
        mcfg = config.model
        apply_runtime_knobs(mcfg)
        # One document per row: plain SDPA serves it; prl's packed kernels need document bounds.
        attn = "sdpa" if mcfg.attn_implementation == "auto" else mcfg.attn_implementation
        hf = load_vision_model(mcfg.name, resolve_dtype(mcfg.dtype, self.dist.device), mcfg.vlm, attn)
        text = hf.config.get_text_config()
        self.hf, self.adapter = hf, None
        self.n_params = count_params(hf)[1]
        self.shape = (text.num_hidden_layers, text.hidden_size)
        self.policy = parallelize_vision(hf, self.dist, mcfg)
        self.gc = GarbageCollector(mcfg.gc)
        self.optimizer = build_optimizer(
            self.policy.parameters(), config.optim, SFT_WEIGHT_DECAY, mcfg, self.dist.device
        )
        self.tokenizer = config.tokenizer.name or mcfg.name
        self.vocab = text.vocab_size
        source = VisionSampleSource(config.data, config.renderer, self.tokenizer, self.vocab, mcfg.vlm)
        self.loader = VisionLoader(source, config.data, self.dist.rank, self.dist.world)
        if config.data.num_workers > 1 and self.dist.is_main:
            log.info("data.num_workers = %d is not used with [model.vlm]: rows render here", config.data.num_workers)
        self.labels = source.labels()
        self.total = config.max_steps or self.loader.steps_per_epoch()
        if self.total < 1:
            raise DataError("data: one epoch has fewer image rows than data.batch_size; set max_steps or add data")
        self.scheduler = build_scheduler(self.optimizer, config.scheduler, self.total)
        self.progress = {"step": 0, "total_tokens": 0, "total_samples": 0}
        self._resume()
        self.val = self._val_rows(self.tokenizer, self.vocab) if config.val is not None else None
        self._observers(config)

    def _observers(self, config: SFTConfig) -> None:
        from prl.contracts.monitor import build_monitors

        main = self.dist.is_main
        self.monitors = build_monitors(config, self.run_dir, "trainer") if main else []
        self.bar = Progress(main and sys.stderr.isatty(), self.total, self.progress["step"])
        self.peak = peak_flops(self.dist.device)
        # The inference backends serve text models only: online eval is refused at resolve time.
        self.transport = None
        self.broadcast_at: set[int] = set()

    def _val_rows(self, tokenizer: str, vocab: int) -> list[VisionRow]:
        v = self.config.val.data
        source = VisionSampleSource(v, self.config.renderer, tokenizer, vocab, self.config.model.vlm)
        rows = list(one_per_row(source.epoch(0), v.seq_len * v.micro_batch_size))
        return rows[self.dist.rank :: self.dist.world]

    def close(self) -> None:
        # Rows skipped in an epoch the run stopped inside of (a whole epoch logs at its end).
        summary = self.loader.source.skipped()
        if summary is not None and self.dist.is_main:
            log.warning("epoch %d so far: %s", self.loader.epoch, summary)
        super().close()

    def _forward_nll(self, row: DeviceRow) -> torch.Tensor:
        logp, _ = self.policy(row.input_ids, row.targets, row.pixels)
        return -(logp * row.loss_mask).sum()


def run(config: SFTConfig) -> int:
    """Run ``[model.vlm]`` SFT in this process (one rank)."""
    return run_here(VisionSFTRun, config)


def main(argv: list[str] | None = None) -> int:
    from prl.config.roots import SFTConfig

    return rank_main(argv, "prl_trainer_torch.vision_sft", "sft.json", SFTConfig, VisionSFTRun)


if __name__ == "__main__":
    sys.exit(main())
