"""The vision tower of a Qwen3.5 / Qwen3-VL model in the trainer: finding it and freezing it
(``[model.vlm] freeze_vision_encoder``).

Reading image parts, the placeholder and the image-token widening are shared with the
inference engine and live in :mod:`prl.images`; they are re-exported here for the trainer's
modules. SFT uses them through :mod:`prl_trainer_torch.vision_rows` and
:mod:`prl_trainer_torch.vision_sft`.
"""

from __future__ import annotations

from prl.images import (  # noqa: F401 (re-exported for the trainer's modules)
    PLACEHOLDER,
    ImageError,
    PixelInputs,
    expand_image_tokens,
    load_image,
    process_images,
    split_images,
)


def vision_tower(model):
    """The vision encoder module of a Qwen-VL-style model (``model.visual`` under the
    conditional-generation wrapper), or None for a text model."""
    for owner in (model, getattr(model, "model", None)):
        tower = getattr(owner, "visual", None) if owner is not None else None
        if tower is not None:
            return tower
    return None


def freeze_vision_tower(model, freeze: bool) -> int:
    """Apply ``freeze_vision_encoder``: with ``freeze``, the tower's parameters get no
    gradient (so an optimizer built afterwards leaves them out). Returns how many parameters
    were frozen (0 without a tower or when training it)."""
    tower = vision_tower(model)
    if tower is None or not freeze:
        return 0
    n = 0
    for p in tower.parameters():
        p.requires_grad_(False)
        n += p.numel()
    return n
