"""A step's packed rows on the training device, sent in one copy.

A plain host-to-device copy (``tensor.to("cuda")`` from ordinary memory) waits until the
GPU has finished everything queued before it. Copying each row as its turn came made every
row's forward wait for the previous row's backward, leaving the GPU idle while the host
queued the next row's kernels. Here the step's rows go over in one copy from pinned memory
that does not wait, and each row's document bounds are found on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from prl_trainer_torch.attention import host_bounds
from prl_trainer_torch.data import PackedRow


@dataclass
class DeviceRow:
    """One packed row cut to its tokens (padding dropped), on the device."""

    input_ids: torch.Tensor  # [1, n]
    position_ids: torch.Tensor  # [1, n]
    targets: torch.Tensor  # [1, n]
    loss_mask: torch.Tensor  # [1, n] bool
    bounds: tuple[torch.Tensor, int]  # documents' cumulative lengths (int32) and the longest
    loss_tokens: int  # counted on the host
    pixels: Any = None  # a [model.vlm] row's images (vision_sft.VisionRow), moved by the forward


def _host_parts(row: PackedRow) -> tuple[list[torch.Tensor], int, int]:
    # Rows go through the model one at a time, so their lengths need not match: the
    # padding trains nothing and is not sent.
    n = max(row.num_tokens, 1)
    mask = row.loss_mask[:n]
    cu, longest = host_bounds(row.position_ids[:n].numpy())
    parts = [row.input_ids[:n], row.position_ids[:n], row.targets[:n], mask, torch.from_numpy(cu)]
    return [p.to(torch.long) for p in parts], longest, int(mask.sum())


def rows_to_device(rows: list[PackedRow], device: torch.device) -> list[DeviceRow]:
    """Every row of ``rows`` on ``device``, in one copy that does not wait for the GPU."""
    if not rows:
        return []
    parts, meta = [], []
    for row in rows:
        row_parts, longest, loss_tokens = _host_parts(row)
        parts.extend(row_parts)
        meta.append((longest, loss_tokens))
    flat = torch.cat(parts)
    if device.type == "cuda":
        # Only a copy from pinned memory may run behind the host's back; the caching host
        # allocator keeps the buffer alive until the copy has finished.
        flat = flat.pin_memory()
    pieces = flat.to(device, non_blocking=True).split([p.numel() for p in parts])
    out = []
    for i, (longest, loss_tokens) in enumerate(meta):
        ids, pos, targets, mask, cu = pieces[5 * i : 5 * i + 5]
        cu = cu.to(torch.int32)
        # The number of documents changes from row to row (see attention.document_bounds).
        torch._dynamo.maybe_mark_dynamic(cu, 0)
        pixels = getattr(rows[i], "pixels", None)
        out.append(
            DeviceRow(ids[None], pos[None], targets[None], mask.bool()[None], (cu, longest), loss_tokens, pixels)
        )
    return out
