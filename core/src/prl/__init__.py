"""prl: asynchronous RL and SFT post-training of LLMs on a plugin core.

Plugins import only :data:`hookimpl` from here and register their classes through the
hooks in :mod:`prl.hookspecs`. Importing ``prl`` never imports torch.
"""

import pluggy

__version__ = "0.1.0"

PROJECT_NAME = "prl"
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

__all__ = ["hookimpl", "__version__", "PROJECT_NAME"]
