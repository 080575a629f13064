"""How a trainer run executes: here in the calling process, or as one torchrun rank that
reads its resolved config from a JSON file. SFT and RL share both paths."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only
    from prl.config.components import TrainerConfig
    from prl.config.roots import SFTConfig


def run_here(run_cls: Any, config: TrainerConfig | SFTConfig) -> int:
    """Build ``run_cls(config)``, train it, and close it on success and error paths."""
    from prl.logs import setup_logging

    # Under `prl sft` the launching process sets $PRL_LOG_FILE: the ranks' lines land in
    # logs/attempt_N/trainer.log (rank 0) as well as on the console.
    setup_logging(config.log)
    run = run_cls(config)
    try:
        run.train()
    finally:
        run.close()
    return 0


def rank_main(argv: list[str] | None, module: str, file_name: str, config_cls: Any, run_cls: Any) -> int:
    """``python -m <module> <resolved config.json>``: one rank under torchrun. A usage error
    (a bad dataset, say) prints one line and exits 2, a run failure (a weight broadcast that
    lost its peer) one line and exit 1, with no traceback."""
    from prl.cli.errors import print_error
    from prl.config.errors import ConfigError, RunError

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
    except RunError as exc:
        print_error(str(exc), "Run error")
        return 1
