"""prl renderers: chat messages to token ids with per-token message and role attribution.

A renderer config builds its renderer::

    renderer = cfg.build(tokenizer=tokenizer_path)   # cfg: the [renderer] section

``auto`` picks a family from the model (see :mod:`prl_renderers.auto`), ``default`` uses the
tokenizer's own chat template, ``custom`` loads a class by import path, and every family of
the ``renderers`` package (``qwen3``, ``llama-3``, ``gpt-oss``, ...) is available by its name.
"""

import sys

# pytest's importlib mode names test modules after their folders, and this repository keeps
# renderer distributions under a top-level folder called ``renderers``: pytest then registers
# that folder as an empty namespace module ``renderers``, hiding the PyPI package of the same
# name. Drop such an impostor (it has no ``__file__``) and import the real package now, so
# it is the one every later ``import renderers...`` finds.
if getattr(sys.modules.get("renderers"), "__file__", "") is None:
    del sys.modules["renderers"]
import renderers as _package  # noqa: E402,F401
from prl_renderers.tokenizer import RendererError, load_tokenizer  # noqa: E402

__all__ = ["RendererError", "load_tokenizer"]
