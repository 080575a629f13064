"""SFT rows with images: a :class:`~prl_trainer_torch.data.RowRenderer` that reads the
image parts of a row, renders the conversation with text placeholders, widens each
placeholder to the image's token count (never trained) and keeps the pixels beside the
tokens.

A sample that carries images is one document per row: the Qwen-VL forward matches the
``image_grid_thw`` rows to the ``<|image_pad|>`` runs of its input in order, and its 3-D
rotary positions are computed per sequence, so packing several image documents into one
row with position resets would mix them up. Text-only samples are unchanged.

A row whose image cannot be read, or whose image tokens do not fit in ``seq_len``, is
skipped and counted (:class:`SkippedImages`), never an error mid-run: one bad file in a
large dataset should cost one row. The count is logged once per run by the caller.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prl_trainer_torch.data import RowRenderer, Sample
from prl_trainer_torch.vision_inputs import ImageError, PixelInputs, expand_image_tokens, process_images, split_images

log = logging.getLogger(__name__)


@dataclass
class VisionSample(Sample):
    """A :class:`Sample` with the pixels of its images (None when it has none)."""

    pixels: PixelInputs | None = None


@dataclass
class SkippedImages:
    """Rows left out for their images: unreadable, or too many image tokens for ``seq_len``."""

    unreadable: int = 0
    too_long: int = 0
    first: list[str] = field(default_factory=list)

    def add(self, kind: str, why: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.first) < 3:  # a few examples name the problem; the rest is a count
            self.first.append(why)

    @property
    def total(self) -> int:
        return self.unreadable + self.too_long

    def summary(self) -> str | None:
        """One line for the run's log, or None when nothing was skipped."""
        if not self.total:
            return None
        return (
            f"skipped {self.total} row(s) for their images ({self.unreadable} unreadable, "
            f"{self.too_long} longer than seq_len once image tokens are counted); first: {'; '.join(self.first)}"
        )


class VisionRowRenderer(RowRenderer):
    """:class:`RowRenderer` for a ``[model.vlm]`` run: rows may carry image parts."""

    def __init__(
        self, data_cfg: Any, renderer_cfg: Any, tokenizer: str, vlm: Any, base_dir: Path | None = None
    ) -> None:
        super().__init__(data_cfg, renderer_cfg, tokenizer)
        from transformers import AutoImageProcessor, AutoTokenizer

        self.vlm = vlm
        self.base_dir = base_dir
        self.image_processor = AutoImageProcessor.from_pretrained(tokenizer)
        self.image_token_id = AutoTokenizer.from_pretrained(tokenizer).convert_tokens_to_ids("<|image_pad|>")
        self.skipped = SkippedImages()
        self._images: list = []

    def messages(self, row: dict, index: int) -> tuple[list[dict], list[bool]]:
        # The base class picks the columns and loss flags; image parts become placeholders
        # here so that any renderer sees plain text.
        msgs, train = super().messages(row, index)
        msgs, self._images = split_images(msgs, self.base_dir)
        return msgs, train

    def sample(self, row: dict, index: int, seq_len: int) -> VisionSample | None:
        """The row as a sample, or None when nothing is trainable or it is skipped."""
        try:
            # Render uncut: a cut through an image's tokens would leave pixels without them.
            base = super().sample(row, index, 1 << 30)
        except ImageError as err:
            self.skipped.add("unreadable", f"row {index}: {err}")
            return None
        images, self._images = self._images, []
        if base is None:
            return None
        if not images:
            return _cut(VisionSample(base.inputs, base.targets, base.mask, base.subset), seq_len)
        pixels = process_images(images, self.image_processor, self.vlm)
        counts = pixels.tokens_per_image(self.image_processor.merge_size)
        # expand_image_tokens works on whole sequences: put the first input back in front.
        ids, mask = expand_image_tokens(
            base.inputs + base.targets[-1:], [False, *base.mask], counts, self.image_token_id
        )
        last_image = max(i for i, t in enumerate(ids) if t == self.image_token_id)
        if last_image >= seq_len:
            self.skipped.add("too_long", f"row {index}: {len(ids)} tokens with {sum(counts)} image tokens")
            return None
        out = VisionSample(ids[:-1], ids[1:], mask[1:], base.subset, pixels)
        return _cut(out, seq_len)


def _cut(s: VisionSample, seq_len: int) -> VisionSample | None:
    if not any(s.mask[:seq_len]):
        return None
    return VisionSample(s.inputs[:seq_len], s.targets[:seq_len], s.mask[:seq_len], s.subset, s.pixels)
