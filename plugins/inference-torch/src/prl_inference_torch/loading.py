"""Build the served state from a resolved InferenceConfig: model, tokenizer, engine."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from prl_inference_torch.engine import Engine
from prl_inference_torch.server import ServerState
from prl_inference_torch.vision import Vision, is_vision_dir
from prl_inference_torch.weights import LoraSet

if TYPE_CHECKING:
    from prl.config.components import InferenceConfig

log = logging.getLogger("prl_inference_torch")


def pick_device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise SystemExit("backend.device is 'cuda' but torch sees no CUDA device")
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(choice)


def pick_dtype(choice: str, device: torch.device) -> torch.dtype:
    if choice == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, choice)


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    gen = getattr(model, "generation_config", None)
    for source in (
        getattr(gen, "eos_token_id", None),
        getattr(model.config, "eos_token_id", None),
        tokenizer.eos_token_id,
    ):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(int(i) for i in source)
    return ids


def _vision(name: str, model: Any, vlm: Any = None) -> Vision | None:
    """The image processor of a vision-language model; without one it serves text only."""
    try:
        vision = Vision.load(name, model, vlm)
    except OSError as exc:
        log.warning("%s has a vision tower but no image processor (%s): image parts will be refused", name, exc)
        return None
    if vision is not None:
        log.info("%s sees images: chat messages may carry image parts", name)
    return vision


def load_state(cfg: InferenceConfig, api_key: str | None) -> ServerState:
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    b = cfg.backend
    if b.num_threads:
        torch.set_num_threads(b.num_threads)
    device = pick_device(b.device)
    dtype = pick_dtype(b.dtype, device)
    name = cfg.model.name
    if b.attn_implementation == "prl_sdpa":
        from prl_inference_torch.attention import register

        register()
    if not Path(name).is_dir():
        log.warning("model.name '%s' is not a local directory; transformers will try its hub cache", name)
    # an image-text model (Qwen3.5 / Qwen3-VL) loads with its vision tower, so chat requests
    # may carry images (vision.py); its text-only class would drop the tower
    auto = AutoModelForImageTextToText if is_vision_dir(name) else AutoModelForCausalLM
    model = auto.from_pretrained(name, dtype=dtype, attn_implementation=b.attn_implementation)
    model.to(device).eval().requires_grad_(False)
    vision = _vision(name, model, cfg.model.vlm)
    tok_cfg = cfg.tokenizer
    tokenizer = AutoTokenizer.from_pretrained(tok_cfg.name or name, trust_remote_code=tok_cfg.trust_remote_code)
    template = tok_cfg.chat_template
    if template and Path(template).is_file():
        template = Path(template).read_text()
    max_len = cfg.max_model_len or getattr(model.config, "max_position_embeddings", None) or 4096
    lora = LoraSet(model)
    engine = Engine(
        model,
        tokenizer,
        max_model_len=max_len,
        eos_ids=eos_ids(model, tokenizer),
        max_batch_size=b.max_batch_size,
        max_prefill_tokens=b.max_prefill_tokens,
        seed=cfg.seed,
        lora=lora,
        cuda_graphs=b.cuda_graphs,
        record_routes=b.return_routed_experts,
    )
    engine.start()
    vocab = model.get_input_embeddings().weight.shape[0]
    log.info("loaded %s on %s (%s), max_model_len %d", name, device, dtype, max_len)
    return ServerState(
        engine=engine,
        tokenizer=tokenizer,
        model_name=name,
        max_model_len=max_len,
        vocab_size=vocab,
        lora=lora,
        api_key=api_key,
        chat_template=template,
        limits=cfg.server.limits,
        admin_timeout=cfg.server.admin_timeout,
        mask_top_k=b.mask_top_k,
        vision=vision,
    )
