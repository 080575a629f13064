"""Blockwise FP8 weights in the DeepSeek-V3 / GLM release format, which vLLM and
transformers' fine-grained FP8 support load as they are.

A quantized linear weight ``W`` (rows x cols) is stored as two tensors:

* ``<module>.weight``: ``float8_e4m3fn``, the real shape of ``W``;
* ``<module>.weight_scale_inv``: ``float32``, ``ceil(rows/128) x ceil(cols/128)``, one
  value per 128 x 128 block. ``fp8 * scale`` gives the weight back, so the name's "inv"
  means "the inverse of the scale that was divided out", not "divide by this".

A block's scale maps its largest magnitude onto e4m3's largest finite value (448). A shape
that is not a multiple of 128 gets a partial last block: its scale covers only the real
elements (zero padding does not change a maximum), and nothing of the padding is stored.

Embeddings, norms, biases, MoE routers, the LM head and vision towers stay in bf16, as
in the published releases: they are small, or precision-sensitive, or not plain matmuls.
"""

from __future__ import annotations

import math
import re

import torch

BLOCK = 128
FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448.0
SCALE_SUFFIX = "_scale_inv"

# Modules kept in bf16, by a component of their dotted name. "gate" alone is an MoE
# router (Qwen3-MoE's mlp.gate, DeepSeek's mlp.gate); gate_proj is a plain projection.
_KEEP_PATTERN = re.compile(
    r"(^|\.)(embed_tokens|embed_positions|wte|wpe|lm_head|gate|router|shared_expert_gate|"
    r"visual|vision_tower|vision_model|multi_modal_projector|mm_projector|[^.]*norm[^.]*)(\.|$)"
)


def quantization_config(not_converted: list[str], block: int = BLOCK) -> dict:
    """The ``quantization_config`` of config.json, keyed as DeepSeek-V3 writes it, plus the
    modules left in bf16 under both names readers use: ``modules_to_not_convert``
    (transformers' ``FineGrainedFP8Config``) and ``ignored_layers`` (vLLM's ``Fp8Config``).
    ``lm_head`` is always listed: transformers skips the output head by default only when no
    list is given, and a tied head has no weight of its own in the files to be found by."""
    skipped = sorted(set(not_converted) | {"lm_head"})
    return {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [block, block],
        "modules_to_not_convert": skipped,
        "ignored_layers": skipped,
    }


def should_quantize(name: str, tensor: torch.Tensor) -> bool:
    """A 2-D ``.weight`` of a linear layer that the releases quantize."""
    if not name.endswith(".weight") or tensor.ndim != 2:
        return False
    return _KEEP_PATTERN.search(name[: -len(".weight")]) is None


def _padded(w: torch.Tensor, block: int) -> torch.Tensor:
    rows, cols = w.shape
    pr, pc = math.ceil(rows / block) * block, math.ceil(cols / block) * block
    if (pr, pc) == (rows, cols):
        return w
    out = w.new_zeros(pr, pc)
    out[:rows, :cols] = w
    return out


def quantize_block(w: torch.Tensor, block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """``(fp8 weight, float32 scale_inv)`` of a 2-D weight, computed in float32."""
    rows, cols = w.shape
    padded = _padded(w.float(), block)
    grid = padded.view(padded.shape[0] // block, block, padded.shape[1] // block, block)
    amax = grid.abs().amax(dim=(1, 3))
    # An all-zero block gets scale 1: any positive scale stores its zeros exactly.
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    q = (grid / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    q = q.view(padded.shape)[:rows, :cols].contiguous()
    return q, scale.contiguous()


def dequantize_block(
    q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.bfloat16, block: tuple[int, int] = (BLOCK, BLOCK)
) -> torch.Tensor:
    """The weight an fp8 tensor and its per-block ``scale_inv`` stand for. ``block`` is the
    config's ``weight_block_size``: it cannot be told from the shapes (300 rows in 3 blocks
    may be blocks of 128 or of 100)."""
    rows, cols = q.shape
    if scale.shape != (math.ceil(rows / block[0]), math.ceil(cols / block[1])):
        raise ValueError(f"scale grid {tuple(scale.shape)} does not fit a {rows}x{cols} weight in {block} blocks")
    full = scale.float().repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)[:rows, :cols]
    return (q.float() * full).to(dtype)


def quantize_state(tensors: dict[str, torch.Tensor], block: int = BLOCK) -> dict[str, torch.Tensor]:
    """The FP8 form of a state dict: quantized weights with their scales, the rest in bf16.

    Every input is rounded to bf16 first, so a float32 source gives the same FP8 tensors as
    its bf16 export does (the DCP -> FP8 path and export -> FP8 path agree bit for bit)."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        t = tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor
        if should_quantize(name, t):
            out[name], out[name + SCALE_SUFFIX] = quantize_block(t, block)
        else:
            out[name] = t.contiguous()
    return out
