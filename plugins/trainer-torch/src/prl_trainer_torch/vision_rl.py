"""The RL trainer's policy for a ``[model.vlm]`` run: the whole image-text model, images in.

A rollout of a vision-language prompt records its images beside the branch
(:attr:`prl.types.Branch.images`); the orchestrator carries them per packed document in the
micro-batch (``images``), and :func:`prl_trainer_torch.rl_step.forward_tokens` hands them to
the policy. :class:`PackedVisionPolicy` takes a packed micro-batch like the text policy
(``[1, T]`` ids, positions restarting at 0 per document, targets, temperatures) and runs
each document through :class:`~prl_trainer_torch.vision_policy.VisionPolicy` with its own
pixels: the image features and 3-D rotary positions are per sequence, so documents are
never packed into one forward here. Truncated sampling's kept ids (sampling replay, the
``replay`` argument) are cut per document the same way.

The pixels come from the model's image processor under ``[model.vlm]``'s
``min_pixels``/``max_pixels`` (its defaults where unset), as the inference server made them
when it widened each image placeholder: ``prl rl`` shares ``[model.vlm]`` with the server. A
document whose image tokens do not match its images' patch counts (a prompt cut by
``seq_len``, a server that processed the images differently) fails the step with one line
naming it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from prl.images import PixelInputs, load_image, process_images
from prl_trainer_torch.lora import Adapter
from prl_trainer_torch.vision_policy import VisionPolicy, load_vision_model, lora_root
from prl_trainer_torch.vision_sft import parallelize_vision

# Pixels of recent image lists, so the backward's recomputation and the next micro-batch
# with the same prompt (a group's samples) do not run the image processor again.
_CACHE_SIZE = 256


class PackedVisionPolicy(nn.Module):
    """Packed micro-batch in, per-token (logp, entropy) out, one document per forward."""

    def __init__(self, vision: VisionPolicy, image_processor: Any, vlm: Any = None) -> None:
        super().__init__()
        self.vision = vision
        self.image_processor = image_processor
        self.vlm = vlm  # [model.vlm]: pixel bounds, the ones the inference server applies too
        self._pixels: dict[tuple[str, ...], PixelInputs] = {}
        self.routing = None  # no MoE routing statistics for a vision-language policy
        self.route_replay = None

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        targets: torch.Tensor,
        temperature: torch.Tensor,
        entropy: bool = False,
        images: list[list[str]] | None = None,
        bounds: Any = None,
        replay: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        starts = (position_ids[0] == 0).nonzero().flatten().tolist() + [input_ids.shape[1]]
        docs = list(zip(starts[:-1], starts[1:], strict=True))
        if images is not None and len(images) != len(docs):
            raise ValueError(f"micro-batch has {len(docs)} documents and {len(images)} image lists")
        outs = []
        for d, (a, b) in enumerate(docs):
            refs = images[d] if images is not None else []
            pixels = self._pixels_of(refs, input_ids[0, a:b], d) if refs else None
            # A document's slice of the sampling masks; their rows are found again per document.
            part = None if replay is None else (replay[0][:, a:b], replay[1][:, a:b])
            outs.append(self.vision(input_ids[:, a:b], targets[:, a:b], pixels, temperature[:, a:b], True, part))
        # (logp, entropy) and, with replay, the kept-set logprobs and mismatch flags, each
        # joined along the packed row
        return tuple(torch.cat(parts, 1) for parts in zip(*outs, strict=True))

    def _pixels_of(self, refs: list[str], ids: torch.Tensor, doc: int) -> PixelInputs:
        key = tuple(refs)
        pixels = self._pixels.get(key)
        if pixels is None:
            pixels = process_images([load_image(r) for r in refs], self.image_processor, self.vlm)
            if len(self._pixels) >= _CACHE_SIZE:
                self._pixels.pop(next(iter(self._pixels)))
            self._pixels[key] = pixels
        want = sum(pixels.tokens_per_image(self.vision.merge))
        have = int((ids == self.vision.image_token_id).sum())
        if have < want:  # more is fine: an image token the policy sampled is an ordinary one
            raise ValueError(
                f"document {doc}: {have} image tokens for {len(refs)} image(s) of {want} patch tokens "
                "(a prompt cut by seq_len, or images processed differently by the inference server)"
            )
        return pixels


def build_vision_policy(mcfg: Any, dist: Any, dtype: torch.dtype) -> tuple[nn.Module, PackedVisionPolicy, Any]:
    """(the image-text model, the RL policy over it, the LoRA adapter or None) for
    ``trainer.model`` with ``[model.vlm]``: the vision tower frozen unless
    ``freeze_vision_encoder = false``; with ``[model.lora]`` only an adapter on the language
    model trains (:func:`~prl_trainer_torch.vision_policy.lora_root`); FSDP2 over the vision
    blocks and decoder layers with several ranks."""
    from transformers import AutoImageProcessor

    hf = load_vision_model(mcfg.name, dtype, mcfg.vlm)
    adapter = Adapter(lora_root(hf), mcfg.lora, mcfg.name) if mcfg.lora is not None else None
    vision = parallelize_vision(hf, dist, mcfg)
    return hf, PackedVisionPolicy(vision, AutoImageProcessor.from_pretrained(mcfg.name), mcfg.vlm), adapter
