"""Image input for a vision-language model (Qwen3.5 / Qwen3-VL) in the torch engine.

A chat message may carry images as OpenAI content parts. For a model with a vision tower
(its config has a ``vision_config`` and an image processor is saved beside it) the server:

1. reads each image part (:func:`load_parts`): a base64 ``data:`` URL, or an
   ``http(s)://`` URL it downloads (at most :data:`MAX_IMAGE_BYTES`). Local paths are not
   read: a request must not make the server open its own files. A part that cannot be read
   is a 400 naming ``messages[i].content[j]``;
2. renders the conversation as the trainer does (:mod:`prl.images`): each image becomes the
   ``<|vision_start|><|image_pad|><|vision_end|>`` placeholder, the chat template renders the
   text, and each ``<|image_pad|>`` is widened to the image's merged patch count, so a prompt
   is the same token ids in ``prl sft`` and here;
3. hands the engine the pixels with the request. The prefill runs the vision tower and
   scatters its features into the placeholder embeddings; rotary positions are 3-D (time,
   height, width over an image), computed per row by the model's ``get_rope_index``
   (:func:`prefill_inputs`). After an image a row's text positions run behind its token
   count by a fixed ``rope_delta``, which every decode step adds back (:func:`decode_positions`).

A text model answers an image part with a 400 saying it cannot see images.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from prl.contracts.http import ApiError
from prl.images import (
    ImageError,
    PixelInputs,
    expand_image_tokens,
    image_parts,
    image_ref,
    load_image,
    process_images,
    split_images,
)

log = logging.getLogger(__name__)

MAX_IMAGE_BYTES = 20 * 2**20
"""Largest image an ``http(s)://`` part may download."""

_FETCH_TIMEOUT = 15.0


def refuse_images(messages: list[dict[str, Any]], model_name: str) -> None:
    """For a text model: a chat template would render an image part as a placeholder with
    no pixels behind it, and the model would answer as if it had seen nothing."""
    for i, j in image_parts(messages)[:1]:
        raise ApiError(
            f"messages[{i}].content[{j}]: {model_name} is a text model and cannot see images "
            "(serve a vision-language model; see docs/vlm.md)"
        )


def _fetch(url: str) -> str:
    """An ``http(s)://`` image as a ``data:`` URL, so it is read like an inline one."""
    import httpx

    try:
        with httpx.stream("GET", url, timeout=_FETCH_TIMEOUT, follow_redirects=True) as resp:
            resp.raise_for_status()
            raw = bytearray()
            for chunk in resp.iter_bytes():
                raw += chunk
                if len(raw) > MAX_IMAGE_BYTES:
                    raise ImageError(f"image {url}: larger than {MAX_IMAGE_BYTES // 2**20} MiB")
    except httpx.HTTPError as exc:
        raise ImageError(f"image {url}: cannot be downloaded ({type(exc).__name__}: {exc})") from None
    return "data:image;base64," + base64.b64encode(bytes(raw)).decode()


def _read(ref: Any):
    if isinstance(ref, str) and ref.startswith(("http://", "https://")):
        return load_image(_fetch(ref))
    if isinstance(ref, str) and ref.startswith("data:"):
        return load_image(ref)
    raise ImageError("the server reads images from data: or http(s):// URLs only, not from its own files")


def load_parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every image part replaced by ``{"type": "image", "image": <PIL>}``;
    a part that cannot be read is a 400 naming it."""
    out = [dict(m) for m in messages]
    for i, j in image_parts(messages):
        part = messages[i]["content"][j]
        try:
            image = _read(image_ref(part))
        except ImageError as exc:
            raise ApiError(f"messages[{i}].content[{j}]: {exc}") from None
        content = list(out[i]["content"])
        content[j] = {"type": "image", "image": image}
        out[i]["content"] = content
    return out


@dataclass
class Vision:
    """What the server keeps for a vision-language model."""

    image_processor: Any
    image_token_id: int
    merge_size: int
    vlm: Any = None  # [model.vlm]: its min_pixels / max_pixels bound every image, as in training

    @classmethod
    def load(cls, name: str, model: torch.nn.Module, vlm: Any = None) -> Vision | None:
        """The model's image processor when ``model`` has a vision tower, else None."""
        token = getattr(model.config, "image_token_id", None)
        if getattr(model.config, "vision_config", None) is None or token is None:
            return None
        from transformers import AutoImageProcessor

        proc = AutoImageProcessor.from_pretrained(name)
        merge = int(getattr(model.config.vision_config, "spatial_merge_size", 2))
        return cls(proc, int(token), merge, vlm)

    def render(
        self, messages: list[dict[str, Any]], render_text: Callable[[list[dict]], list[int]]
    ) -> tuple[list[int], PixelInputs | None]:
        """Token ids (image placeholders widened) and pixels of a conversation;
        ``render_text`` renders messages whose contents are plain strings."""
        if not image_parts(messages):
            return render_text(messages), None
        text, images = split_images(load_parts(messages))
        return self._widen(render_text(text), images, "messages")

    def widen(self, ids: list[int], refs: list[str]) -> tuple[list[int], PixelInputs]:
        """The token route: ``ids`` hold one image token per image of ``refs`` (data: or
        http(s):// URLs, in order); each is widened to its image's patch count. A prompt
        already widened (a later turn of the same conversation) is taken as it is."""
        images = []
        for k, ref in enumerate(refs):
            try:
                images.append(_read(ref))
            except ImageError as exc:
                raise ApiError(f"images[{k}]: {exc}") from None
        return self._widen(list(ids), images, "token_ids")

    def _widen(self, ids: list[int], images: list, where: str) -> tuple[list[int], PixelInputs]:
        try:
            pixels = process_images(images, self.image_processor, self.vlm)
        except Exception as exc:  # the processor's own refusal (a degenerate size, ...)
            raise ApiError(f"images: the image processor cannot take these images ({exc})") from None
        counts = pixels.tokens_per_image(self.merge_size)
        if _runs(ids, self.image_token_id) == counts:
            return ids, pixels  # already widened: a later turn sends back the prompt it was given
        try:
            ids, _ = expand_image_tokens(ids, [True] * len(ids), counts, self.image_token_id)
        except ValueError as exc:
            raise ApiError(f"{where}: {exc} (one image placeholder token per image)") from None
        return ids, pixels


def _runs(ids: list[int], token: int) -> list[int]:
    """Lengths of the runs of ``token`` in ``ids``, in order."""
    runs: list[int] = []
    prev = None
    for t in ids:
        if t == token:
            if prev == token:
                runs[-1] += 1
            else:
                runs.append(1)
        prev = t
    return runs


def is_vision_model(model: torch.nn.Module) -> bool:
    """A model whose forward takes pixels and 3-D rotary positions (``get_rope_index``)."""
    inner = getattr(model, "model", None)
    return getattr(model.config, "image_token_id", None) is not None and hasattr(inner, "get_rope_index")


def prefill_inputs(
    model: torch.nn.Module,
    ids: torch.Tensor,
    mask: torch.Tensor,
    positions: torch.Tensor,
    pixels: list[PixelInputs | None],
) -> tuple[dict[str, torch.Tensor], list[int]]:
    """Forward arguments of a left-padded prefill batch whose rows may hold images: the
    pixels of every row in order, their grids, and position ids ``[4, rows, len]`` (text
    positions, then time/height/width); plus each row's rope delta."""
    present = [p for p in pixels if p is not None]
    if not present:
        return {"position_ids": positions}, [0] * len(pixels)
    device = ids.device
    grid = torch.cat([p.image_grid_thw for p in present]).to(device)
    dtype = next(model.parameters()).dtype
    values = torch.cat([p.pixel_values for p in present]).to(device, dtype)
    kinds = (ids == model.config.image_token_id).int()
    rope, deltas = model.model.get_rope_index(ids, kinds, image_grid_thw=grid, attention_mask=mask.long())
    pos = torch.cat([positions[None], rope.to(positions.dtype)], 0)
    return {"position_ids": pos, "pixel_values": values, "image_grid_thw": grid}, deltas.view(-1).tolist()


def decode_positions(pos: torch.Tensor, deltas: torch.Tensor) -> torch.Tensor:
    """Position ids ``[4, rows, 1]`` of a decode step: text positions ``pos`` ([rows]) and,
    for the three rotary axes, ``pos`` plus each row's rope delta."""
    text = pos[None, :, None]
    rope = (pos + deltas)[None, :, None].expand(3, -1, -1)
    return torch.cat([text, rope], 0)


def is_vision_dir(name: str) -> bool:
    """Whether the model ``name`` (a directory, or a hub id in the local cache) is an
    image-text model: its config has a vision tower."""
    from transformers import AutoConfig

    return getattr(AutoConfig.from_pretrained(name), "vision_config", None) is not None


class LanguageView(torch.nn.Module):
    """A vision-language model without its vision tower, under the same names
    (``model.language_model.*``, ``lm_head``) and sharing its parameters: RL on a text
    taskset trains the language part alone and publishes just that, which updates the served
    model through this view while the tower keeps its weights."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = torch.nn.Module()
        self.model.language_model = model.model.language_model
        self.lm_head = model.get_output_embeddings()
        self.config = model.config.get_text_config()


def weight_target(model: torch.nn.Module, names: list[str]) -> torch.nn.Module:
    """What a weight update with tensors ``names`` loads into: the served model, or for a
    vision-language model sent its language part alone, a :class:`LanguageView`."""
    if not is_vision_model(model) or not names or any(".visual." in n for n in names):
        return model
    view = LanguageView(model)
    own = view.state_dict(keep_vars=True)
    return view if all(n in own for n in names) else model
