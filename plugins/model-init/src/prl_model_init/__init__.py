"""prl model init: random Qwen3-architecture models with a byte-level ChatML tokenizer.

``make_model(out, preset="tiny", seed=0)`` writes a Hugging Face model directory with no
network access; ``prl model init --preset tiny --out DIR`` does the same from the CLI.
"""

from prl_model_init.build import (
    PRESETS,
    ModelInitError,
    active_parameters,
    count_parameters,
    make_model,
    model_config,
)

__all__ = ["PRESETS", "ModelInitError", "active_parameters", "count_parameters", "make_model", "model_config"]
