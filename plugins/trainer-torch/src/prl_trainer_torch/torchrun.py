"""``python -m prl_trainer_torch.torchrun ...``: torchrun whose failure is one line, not a
traceback.

The ranks already print what went wrong (a bad dataset row, say, as one line) before they
exit. torchrun then raises ``ChildFailedError`` and Python prints its traceback, which
buries that line; this entry point runs torchrun's own ``main`` and turns that exception
into the ranks' exit code (2, a usage error, when any rank exited 2).
"""

from __future__ import annotations

import sys


def main() -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    try:
        torchrun_main()
    except ChildFailedError as exc:
        codes = {failure.exitcode for failure in exc.failures.values()}
        if 2 in codes:  # a usage error: the rank's own one-line message is the last word
            return 2
        print(f"prl: {exc.name} failed on rank(s) {sorted(exc.failures)} (exit codes {sorted(codes)})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
