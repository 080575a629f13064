"""The trainer's policy forward for a vision-language model: target log-probabilities of
one document with its images, through the same chunked head as text models
(:func:`prl_trainer_torch.replay.policy_head`), so full logits are never materialised.

A document with images goes through the conditional-generation model's own ``model``
(vision tower, image features scattered into the ``<|image_pad|>`` embeddings, 3-D rotary
positions from ``image_grid_thw``), one document per call: the rope indices and the image
feature scatter are per sequence, so these documents are never packed
(:mod:`prl_trainer_torch.vision_rows`).
"""

from __future__ import annotations

import torch
from torch import nn

from prl_trainer_torch.logprobs import DEFAULT_CHUNK
from prl_trainer_torch.replay import policy_head
from prl_trainer_torch.vision_inputs import PixelInputs, freeze_vision_tower


def load_vision_model(name: str, dtype: torch.dtype, vlm, attn: str = "sdpa") -> nn.Module:
    """The full image-text model in ``name`` (vision tower included), with
    ``vlm.freeze_vision_encoder`` applied before any optimizer sees its parameters."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(name, dtype=dtype, attn_implementation=attn)
    model.config.use_cache = False
    freeze_vision_tower(model, vlm.freeze_vision_encoder)
    return model


def lora_root(hf: nn.Module) -> nn.Module:
    """Where ``[model.lora]`` adapts an image-text model: its language model only. The
    vision tower stays as loaded (its batch is image patches, not the rows an inference
    engine's per-row adapters index), and every weight outside the adapter is frozen."""
    for p in hf.parameters():
        p.requires_grad_(False)
    return hf.get_decoder()


class VisionPolicy(nn.Module):
    """Wraps a Qwen-VL conditional-generation model; forward gives (logp, entropy) of the
    targets of one document ([1, n] ids and targets) with its images' pixels (or None)."""

    def __init__(self, hf: nn.Module, chunk_size: int = DEFAULT_CHUNK) -> None:
        super().__init__()
        self.hf = hf
        self.chunk_size = chunk_size
        self.image_token_id = hf.config.image_token_id
        self.merge = int(getattr(hf.config.vision_config, "spatial_merge_size", 2))

    def forward(
        self,
        input_ids: torch.Tensor,
        targets: torch.Tensor,
        pixels: PixelInputs | None,
        temperature: torch.Tensor | float = 1.0,
        entropy: bool = False,
        replay: tuple[torch.Tensor, ...] | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """(logp, entropy) of ``targets``; with ``replay = (ids, valid)`` (the sampler's kept
        ids per position, [1, n, K]) also the kept-set logprobs and mismatch flags, logp then
        renormalised over the kept set (:func:`prl_trainer_torch.replay.policy_head`)."""
        if input_ids.shape[0] != 1:
            raise ValueError(f"VisionPolicy takes one document per call, got a batch of {input_ids.shape[0]}")
        kwargs = {}
        images = torch.zeros_like(input_ids, dtype=torch.bool)
        if pixels is not None:
            dev = input_ids.device
            kwargs = {"pixel_values": pixels.pixel_values.to(dev), "image_grid_thw": pixels.image_grid_thw.to(dev)}
            # The images' tokens are the first ones of the image-token id (the prompt's runs).
            # One the policy sampled later is an ordinary token, embedded as the sampler did.
            pads = input_ids == self.image_token_id
            images = pads & (pads.cumsum(-1) <= sum(pixels.tokens_per_image(self.merge)))
        out = self.hf.model(
            # placeholders are found in input_ids: a sampled image token is hidden from them
            input_ids=torch.where(images | (input_ids != self.image_token_id), input_ids, 0),
            inputs_embeds=self.hf.get_input_embeddings()(input_ids),
            attention_mask=torch.ones_like(input_ids),
            mm_token_type_ids=images.int(),  # the image tokens get 3-D rotary positions
            use_cache=False,
            **kwargs,
        )
        weight = self.hf.get_output_embeddings().weight
        return policy_head(out.last_hidden_state, weight, targets, temperature, self.chunk_size, entropy, replay)
