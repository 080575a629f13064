"""Images in chat messages, the part of the OpenAI content format every component reads
the same way: the trainer (``prl sft`` with ``[model.vlm]``) and the torch inference engine
(``/v1/chat/completions`` with image parts) both go through these functions, so a prompt
with an image is the same token ids and pixels in training and in sampling.

A message carries images as content parts, ``{"type": "image_url", "image_url": {"url":
...}}`` (also ``{"type": "image", "image": ...}``), where the url is a
``data:image/...;base64,`` URL, a ``file://`` URL or a local path. This module:

* reads them (:func:`load_image`; an unreadable one is an :class:`ImageError`, one line
  naming the image, so a dataset reader can skip the row and count it, and a server can
  answer 400);
* replaces each image part by its text placeholder ``<|vision_start|><|image_pad|><|vision_end|>``
  (:func:`split_images`), so any renderer or chat template tokenizes the conversation as text;
* runs the model's image processor (:func:`process_images`);
* widens each ``<|image_pad|>`` of the token ids to the image's merged patch count, carrying
  a per-token loss mask along (:func:`expand_image_tokens`): image tokens are never trained.

Pillow is imported only when an image is read.
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"


class ImageError(ValueError):
    """An image part that cannot be read; the message is one line naming it."""


def _describe(ref: str) -> str:
    return ref[:40] + "..." if len(ref) > 40 else ref


def load_image(ref: Any, base_dir: Path | None = None):
    """The RGB ``PIL.Image`` an image part points at: a ``data:`` URL, a ``file://`` URL, a
    path (relative ones against ``base_dir``), or an image object already."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(ref, Image.Image):
        return ref.convert("RGB")
    if not isinstance(ref, str) or not ref:
        raise ImageError(f"image {ref!r}: expected a data: URL or a file path")
    try:
        if ref.startswith("data:"):
            head, _, body = ref.partition(",")
            if not head.endswith(";base64"):
                raise ImageError(f"image {_describe(ref)}: only base64 data: URLs are supported")
            raw = io.BytesIO(base64.b64decode(body, validate=True))
        else:
            path = Path(ref.removeprefix("file://")).expanduser()
            raw = path if path.is_absolute() or base_dir is None else base_dir / path
        with Image.open(raw) as img:
            return img.convert("RGB")
    except ImageError:
        raise
    # A decompression bomb (far past PIL's pixel limit) is a bad image like any other.
    except (OSError, UnidentifiedImageError, binascii.Error, ValueError, Image.DecompressionBombError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ImageError(f"image {_describe(ref)}: cannot be read ({why})") from None


IMAGE_PARTS = ("image_url", "image", "input_image")
"""Content part types that carry an image (``input_image``: the OpenAI responses spelling)."""


def image_ref(part: dict) -> Any:
    """What an image part points at: its URL, path or image object."""
    if part.get("type") in ("image_url", "input_image"):
        url = part.get("image_url")
        return url.get("url") if isinstance(url, dict) else url
    return part.get("image", part.get("url", part.get("path")))


def split_images(messages: list[dict], base_dir: Path | None = None) -> tuple[list[dict], list]:
    """(messages with every image part replaced by :data:`PLACEHOLDER` and list contents
    joined into one string, the loaded images in order of appearance). Raises
    :class:`ImageError` for an image that cannot be read."""
    return _split(messages, lambda part: load_image(image_ref(part), base_dir))


def split_image_refs(messages: list[dict], base_dir: Path | None = None) -> tuple[list[dict], list[str]]:
    """Like :func:`split_images`, but the images stay references to send to a server: a
    ``data:`` or ``http(s)://`` URL as it is, a local file (a path or ``file://`` URL)
    read into a ``data:`` URL, an image object encoded as PNG. Raises :class:`ImageError`
    for a file that cannot be read."""
    return _split(messages, lambda part: _as_url(image_ref(part), base_dir))


def _as_url(ref: Any, base_dir: Path | None) -> str:
    if isinstance(ref, str) and ref.startswith(("data:", "http://", "https://")):
        return ref
    image = load_image(ref, base_dir)  # a file or an image object: sent as pixels, PNG-encoded
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def image_parts(messages: list[dict]) -> list[tuple[int, int]]:
    """``(message, part)`` indices of every image part."""
    found = []
    for i, msg in enumerate(messages):
        parts = msg.get("content")
        for j, part in enumerate(parts if isinstance(parts, list) else []):
            if isinstance(part, dict) and part.get("type") in IMAGE_PARTS:
                found.append((i, j))
    return found


def has_image_parts(messages: list[dict]) -> bool:
    """Whether any message carries an image part."""
    return bool(image_parts(messages))


def _split(messages: list[dict], take: Any) -> tuple[list[dict], list]:
    out, images = [], []
    for msg in messages:
        content = msg.get("content")
        if not isinstance(content, list):
            out.append(msg)
            continue
        text = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in IMAGE_PARTS:
                images.append(take(part))
                text.append(PLACEHOLDER)
            elif kind == "text":
                text.append(str(part.get("text", "")))
            else:
                raise ImageError(f"content part {part!r}: expected type text, image_url, input_image or image")
        out.append({**msg, "content": "".join(text)})
    return out, images


@dataclass
class PixelInputs:
    """The vision inputs of one sample: ``pixel_values`` (patches x features) and
    ``image_grid_thw`` (images x 3), as the image processor made them."""

    pixel_values: Any
    image_grid_thw: Any

    def tokens_per_image(self, merge_size: int) -> list[int]:
        return [int(t * h * w) // merge_size**2 for t, h, w in self.image_grid_thw.tolist()]


def process_images(images: list, image_processor, vlm=None) -> PixelInputs:
    """Run the model's image processor, with ``[model.vlm]``'s pixel bounds when set."""
    kwargs = {}
    if vlm is not None and (vlm.min_pixels or vlm.max_pixels):
        size = dict(image_processor.size)
        if vlm.min_pixels:
            size["shortest_edge"] = vlm.min_pixels
        if vlm.max_pixels:
            size["longest_edge"] = vlm.max_pixels
        kwargs["size"] = size
    out = image_processor(images=images, return_tensors="pt", **kwargs)
    return PixelInputs(out["pixel_values"], out["image_grid_thw"])


def expand_image_tokens(
    ids: list[int], mask: list[bool], counts: list[int], image_token_id: int
) -> tuple[list[int], list[bool]]:
    """Repeat the i-th ``image_token_id`` of ``ids`` ``counts[i]`` times; image tokens get a
    false loss mask. ValueError when the number of placeholders is not ``len(counts)``."""
    found = sum(1 for t in ids if t == image_token_id)
    if found != len(counts):
        raise ValueError(f"the rendered sample has {found} image placeholders for {len(counts)} images")
    new_ids: list[int] = []
    new_mask: list[bool] = []
    it = iter(counts)
    for tok, m in zip(ids, mask, strict=True):
        if tok == image_token_id:
            n = next(it)
            new_ids += [tok] * n
            new_mask += [False] * n
        else:
            new_ids.append(tok)
            new_mask.append(m)
    return new_ids, new_mask
