"""Make a randomly initialised Qwen3-architecture model directory, offline and deterministic.

Dense presets are ``Qwen3ForCausalLM``; the ``-moe`` presets are ``Qwen3MoeForCausalLM``
(every decoder layer's MLP is a sparse block of routed experts with a softmax top-k router);
``tiny-qwen3.5`` is a text-only Qwen3.5 hybrid (``Qwen3_5ForCausalLM``, model type
``qwen3_5_text``): three Gated DeltaNet (linear attention) layers to one full-attention layer,
the published models' pattern; ``tiny-qwen3.5-vl`` is that text stack under a small vision
tower (``Qwen3_5ForConditionalGeneration``, model type ``qwen3_5``) with the image processor
files beside the tokenizer (see ``prl_model_init.vision``).

The directory is a plain Hugging Face checkpoint (``config.json``, ``model.safetensors``,
``generation_config.json``, tokenizer files with a chat template) that loads with
``AutoModelForCausalLM`` / ``AutoTokenizer`` and in vLLM. Weights come from the model's own
initialiser under ``torch.manual_seed(seed)``, so one (preset, seed) pair always gives the
same tensors. The directory is written next to its final place and renamed into it, so a
crash never leaves a half-written model behind.

``config.json`` and ``tokenizer_config.json`` carry ``"prl_renderer": "qwen3"``: the chat
format is Qwen3's, and ``prl-renderers``' ``auto`` renderer reads this marker.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from prl_model_init.tokenizer import CHAT_TEMPLATE, SPECIAL_TOKENS, VL_CHAT_TEMPLATE, VOCAB_SIZE, build_tokenizer
from prl_model_init.vision import VisionPreset, save_processor, vl_config

RENDERER_MARKER = "prl_renderer"
RENDERER_FAMILY = "qwen3"


@dataclass(frozen=True)
class Preset:
    """Shape of one model size. Head size 32/64 is one vLLM's CPU attention supports.

    ``num_experts > 0`` makes it a Qwen3-MoE model: each layer's MLP is ``num_experts``
    experts of width ``moe_intermediate_size``, ``experts_per_token`` of them per token.

    ``full_attention_interval > 0`` makes it a Qwen3.5 hybrid: every that-many-th layer is
    full attention, the others Gated DeltaNet with ``linear_heads`` = (key heads, value
    heads) of size ``linear_head_dim``."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    max_position_embeddings: int
    vocab_size: int = VOCAB_SIZE
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    full_attention_interval: int = 0
    linear_heads: tuple[int, int] = (0, 0)
    linear_head_dim: int = 0
    vision: VisionPreset | None = None

    @property
    def moe(self) -> bool:
        return self.num_experts > 0

    @property
    def hybrid(self) -> bool:
        return self.full_attention_interval > 0


# Qwen3's real vocabulary: the embedding and head have the published shapes although the
# byte-level tokenizer only ever produces the first few hundred ids.
QWEN3_VOCAB = 151936

PRESETS: dict[str, Preset] = {
    # ~1.6M parameters: learns short string reversal in minutes on two CPU cores.
    "tiny": Preset(192, 4, 6, 2, 32, 512, 2048),
    # ~9.6M parameters: room for multi-task experiments, still CPU-trainable.
    "small": Preset(384, 6, 6, 2, 64, 1024, 4096),
    # ~5.2M parameters, ~1.6M active per token: tiny's attention, and 8 experts (top-2) of
    # width 256 per layer, so the two experts a token uses are as wide as tiny's MLP.
    "tiny-moe": Preset(192, 4, 6, 2, 32, 512, 2048, num_experts=8, experts_per_token=2, moe_intermediate_size=256),
    # ~1.7M parameters: Qwen3.5's hybrid text stack at tiny's width. Layers 0-2 are Gated
    # DeltaNet (2 key / 4 value heads of 32), layer 3 full attention (4 heads of 64, 2 KV,
    # output-gated, a quarter of each head rotated), as in the published models.
    "tiny-qwen3.5": Preset(
        192, 4, 4, 2, 64, 512, 2048, full_attention_interval=4, linear_heads=(2, 4), linear_head_dim=32
    ),
    # ~2.0M parameters: tiny-qwen3.5's text stack under a 2-block ViT of width 64 (8-pixel
    # patches, 2x2 merged: a 64x64 image is 16 image tokens, at most 128x128 = 64 tokens).
    "tiny-qwen3.5-vl": Preset(
        192,
        4,
        4,
        2,
        64,
        512,
        2048,
        full_attention_interval=4,
        linear_heads=(2, 4),
        linear_head_dim=32,
        vision=VisionPreset(),
    ),
    # The published Qwen3 shapes, for GPU runs and benchmarks (random weights).
    "qwen3-0.6b": Preset(1024, 28, 16, 8, 128, 3072, 40960, QWEN3_VOCAB),
    "qwen3-1.7b": Preset(2048, 28, 16, 8, 128, 6144, 40960, QWEN3_VOCAB),
    "qwen3-4b": Preset(2560, 36, 32, 8, 128, 9728, 40960, QWEN3_VOCAB),
    "qwen3-8b": Preset(4096, 36, 32, 8, 128, 12288, 40960, QWEN3_VOCAB),
}


class ModelInitError(ValueError):
    """A bad argument to :func:`make_model`; the message is one line naming the field."""


def _special_id(name: str) -> int:
    return 256 + [t for t, _ in SPECIAL_TOKENS].index(name)


def model_config(preset: str):
    """The transformers config of a preset: ``Qwen3Config``, ``Qwen3MoeConfig`` for an MoE
    preset, ``Qwen3_5TextConfig`` for a hybrid one; tied embeddings, float32, ChatML ids."""
    if preset not in PRESETS:
        raise ModelInitError(f"--preset must be one of {', '.join(PRESETS)} (got {preset!r})")
    p = PRESETS[preset]
    common = {
        "vocab_size": p.vocab_size,
        "hidden_size": p.hidden_size,
        "intermediate_size": p.intermediate_size,
        "num_hidden_layers": p.num_hidden_layers,
        "num_attention_heads": p.num_attention_heads,
        "num_key_value_heads": p.num_key_value_heads,
        "head_dim": p.head_dim,
        "max_position_embeddings": p.max_position_embeddings,
        "tie_word_embeddings": True,
        "bos_token_id": None,
        "eos_token_id": _special_id("<|im_end|>"),
        "pad_token_id": _special_id("<|pad|>"),
        "dtype": "float32",
        RENDERER_MARKER: RENDERER_FAMILY,
    }
    if p.hybrid and p.vision is not None:
        return vl_config(_hybrid_config(p, common), p.vision)
    if p.hybrid:
        return _hybrid_config(p, common)
    from transformers import Qwen3Config, Qwen3MoeConfig

    moe = {}
    if p.moe:
        # norm_topk_prob as in the published Qwen3-MoE models: a token's expert weights sum to 1.
        moe = {
            "num_experts": p.num_experts,
            "num_experts_per_tok": p.experts_per_token,
            "moe_intermediate_size": p.moe_intermediate_size,
            "norm_topk_prob": True,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
        }
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    return (Qwen3MoeConfig if p.moe else Qwen3Config)(rope_parameters=rope, **common, **moe)


def _hybrid_config(p: Preset, common: dict):
    """A text-only Qwen3.5 config. Its class, ``Qwen3_5ForCausalLM``, is what
    ``AutoModelForCausalLM`` builds for model type ``qwen3_5_text``; the layer pattern is
    written out in ``layer_types`` so no reader has to know the interval rule."""
    from transformers import Qwen3_5TextConfig

    layer_types = [
        "full_attention" if (i + 1) % p.full_attention_interval == 0 else "linear_attention"
        for i in range(p.num_hidden_layers)
    ]
    # Qwen3.5 rotates a quarter of each head with multimodal RoPE, its frequency pairs split
    # over (time, height, width) as the published [11, 11, 10] of 32 (here [3, 3, 2] of 8).
    # A text token has the same position on all three axes, so this is plain RoPE for text.
    pairs = p.head_dim // 4 // 2
    sections = [(pairs + 2) // 3, (pairs + 2) // 3, pairs - 2 * ((pairs + 2) // 3)]
    rope = {
        "rope_type": "default",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": sections,
        "mrope_interleaved": True,
    }
    keys, values = p.linear_heads
    return Qwen3_5TextConfig(
        layer_types=layer_types,
        linear_num_key_heads=keys,
        linear_num_value_heads=values,
        linear_key_head_dim=p.linear_head_dim,
        linear_value_head_dim=p.linear_head_dim,
        linear_conv_kernel_dim=4,
        rope_parameters=rope,
        **common,
    )


def _save_tokenizer(out: Path, preset: str) -> None:
    from transformers import PreTrainedTokenizerFast

    vision = PRESETS[preset].vision
    # A VL tokenizer names its vision markers so processors find them by attribute.
    markers = (
        {
            "image_token": "<|image_pad|>",
            "video_token": "<|video_pad|>",
            "vision_start_token": "<|vision_start|>",
            "vision_end_token": "<|vision_end|>",
        }
        if vision
        else {}
    )
    template = VL_CHAT_TEMPLATE if vision else CHAT_TEMPLATE
    tok = PreTrainedTokenizerFast(
        tokenizer_object=build_tokenizer(vision=vision is not None),
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        chat_template=template,
        model_max_length=PRESETS[preset].max_position_embeddings,
        clean_up_tokenization_spaces=False,
        **({"extra_special_tokens": markers} if markers else {}),
    )
    tok.save_pretrained(out)
    if vision:
        save_processor(out, vision, template)
    # The marker lives in tokenizer_config.json too, so a renderer given only a tokenizer
    # directory can still resolve ``auto``.
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg[RENDERER_MARKER] = RENDERER_FAMILY
    # transformers 5 writes its own backend class name; the generic one loads on 4.x too.
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def _auto_class(preset: str):
    """``AutoModelForImageTextToText`` for a vision preset (its causal-LM mapping would build
    the text-only class), ``AutoModelForCausalLM`` otherwise."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    return AutoModelForImageTextToText if PRESETS[preset].vision else AutoModelForCausalLM


def _save_model(out: Path, preset: str, seed: int) -> None:
    import torch
    from transformers import GenerationConfig
    from transformers.utils import logging as hf_logging

    config = model_config(preset)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _auto_class(preset).from_config(config)
    # A one-shard progress bar is noise on the CLI's stderr.
    bars = not hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(out, safe_serialization=True)
    finally:
        if not bars:
            hf_logging.enable_progress_bar()
    if PRESETS[preset].moe:
        _published_expert_key(out)
    GenerationConfig(
        eos_token_id=[_special_id("<|im_end|>"), _special_id("<|endoftext|>")],
        pad_token_id=_special_id("<|pad|>"),
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
    ).save_pretrained(out)


def _published_expert_key(out: Path) -> None:
    """transformers 5 writes the expert count as ``num_local_experts`` (its own attribute
    name); the published Qwen3-MoE configs, transformers 4 and other readers of config.json
    know it as ``num_experts``, which transformers 5 maps back on load."""
    path = out / "config.json"
    cfg = json.loads(path.read_text())
    if "num_local_experts" in cfg:
        cfg["num_experts"] = cfg.pop("num_local_experts")
        path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def make_model(out: str | Path, preset: str = "tiny", seed: int = 0, force: bool = False) -> Path:
    """Write a random ``preset`` model with the byte-level ChatML tokenizer to ``out``.

    Args:
        out: target directory; must be absent or empty unless ``force`` replaces it.
        preset: a key of ``PRESETS`` (``"tiny"``, ``"small"``, ``"tiny-moe"``, ...).
        seed: torch seed for the initial weights; equal seeds give equal weights.
        force: replace a non-empty ``out``.

    Returns:
        ``out`` as an absolute path.

    Raises:
        ModelInitError: unknown preset, negative seed, or a non-empty ``out`` without force.
    """
    if preset not in PRESETS:
        raise ModelInitError(f"--preset must be one of {', '.join(PRESETS)} (got {preset!r})")
    if not isinstance(seed, int) or seed < 0:
        raise ModelInitError(f"--seed must be a non-negative integer (got {seed!r})")
    target = Path(out).expanduser().absolute()
    if target.exists() and not target.is_dir():
        raise ModelInitError(f"--out {target} exists and is not a directory")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise ModelInitError(f"--out {target} is not empty; pass --force to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it owner-only; a model directory is meant to be shared
    try:
        _save_model(staging, preset, seed)
        _save_tokenizer(staging, preset)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def count_parameters(preset: str) -> int:
    """Number of distinct parameters of a preset (tied embeddings counted once)."""
    import torch

    with torch.device("meta"):
        model = _auto_class(preset).from_config(model_config(preset))
    return sum(p.numel() for p in model.parameters())


def active_parameters(preset: str) -> int:
    """Parameters one token's forward pass uses: all of a dense preset; of an MoE preset,
    only ``experts_per_token`` of each layer's ``num_experts`` experts."""
    p = PRESETS[preset]
    total = count_parameters(preset)
    if not p.moe:
        return total
    # gate, up and down projections of one expert
    per_expert = 3 * p.hidden_size * p.moe_intermediate_size
    return total - p.num_hidden_layers * (p.num_experts - p.experts_per_token) * per_expert
