"""Load a tokenizer for a renderer without importing torch.

The orchestrator renders prompts and must stay torch-free. ``AutoTokenizer`` imports torch,
while ``PreTrainedTokenizerFast`` over a ``tokenizer.json`` does not, so a local directory
with a ``tokenizer.json`` loads through the latter. Anything else (a hub id, a slow-only
tokenizer) goes through the ``renderers`` package's loader, which uses ``AutoTokenizer``.
Loaded tokenizers are cached per path: renderers are cheap to make, tokenizers are not.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any


class RendererError(ValueError):
    """A renderer could not be built or used; the message is one line naming the field."""


@lru_cache(maxsize=16)
def load_tokenizer(path: str) -> Any:
    """The tokenizer at ``path`` (a local directory or a model id)."""
    local = Path(path).expanduser()
    try:
        if (local / "tokenizer.json").is_file():
            from transformers import PreTrainedTokenizerFast

            return PreTrainedTokenizerFast.from_pretrained(str(local))
        from renderers.base import load_tokenizer as load_any

        return load_any(path)
    except Exception as exc:  # one line instead of a hub/transformers traceback
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RendererError(f"cannot load tokenizer {path!r}: {first}") from exc


def resolve_tokenizer(tokenizer: Any) -> tuple[Any, str]:
    """(tokenizer object, its name) from a path/id string or an already loaded tokenizer."""
    if isinstance(tokenizer, (str, Path)):
        return load_tokenizer(str(tokenizer)), str(tokenizer)
    return tokenizer, str(getattr(tokenizer, "name_or_path", "") or "<tokenizer object>")


def read_json(directory: str, name: str) -> dict:
    """``directory/name`` parsed, or {} when absent or not a local directory."""
    file = Path(directory).expanduser() / name
    try:
        return json.loads(file.read_text()) if file.is_file() else {}
    except (OSError, ValueError):
        return {}


def generation_eos_ids(directory: str) -> list[int]:
    """``eos_token_id`` of ``generation_config.json`` (an int or a list), or []."""
    eos = read_json(directory, "generation_config.json").get("eos_token_id")
    if isinstance(eos, int):
        return [eos]
    return [e for e in eos if isinstance(e, int)] if isinstance(eos, list) else []
