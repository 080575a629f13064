"""How a trainer run executes: here in the calling process, or as one torchrun rank that
reads its resolved config from a JSON file. SFT and RL share both paths."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any


def run_here(run_cls: Any, config: Any) -> int:
    """Build ``run_cls(config)``, train it, and close it on success and error paths."""
    level = getattr(logging, config.log.level.upper())
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(message)s")
    run = run_cls(config)
    try:
        run.train()
    finally:
        run.close()
    return 0


def rank_main(argv: list[str] | None, module: str, file_name: str, config_cls: Any, run_cls: Any) -> int:
    """``python -m <module> <resolved config.json>``: one rank under torchrun. A usage error
    (a bad dataset, say) prints one line and exits 2, with no traceback."""
    from prl.cli.errors import print_error
    from prl.config.errors import ConfigError

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {module} <resolved {file_name}>", file=sys.stderr)
        return 2
    config = config_cls.model_validate_json(Path(args[0]).read_text())
    try:
        return run_here(run_cls, config)
    except ConfigError as exc:
        print_error(exc.message, exc.title)
        return 2
