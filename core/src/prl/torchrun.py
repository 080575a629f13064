"""The one way prl starts torch.distributed ranks.

:func:`command` builds the command line every launch path uses: the torch trainer on one
host (``--standalone``), ``prl export --num-workers N``, and the SLURM launcher across
trainer nodes (a c10d rendezvous). It runs ``python -m prl.torchrun``, torchrun whose
failure is one line, not a traceback (torch is imported only when it runs; core stays
torch-free).

The ranks already print what went wrong (a bad dataset row, say, as one line) before they
exit. torchrun then raises ``ChildFailedError`` and Python prints its traceback, which
buries that line; this entry point runs torchrun's own ``main`` and turns that exception
into the ranks' exit code (2, a usage error, when any rank exited 2).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path


def command(
    target: Sequence[str],
    *,
    nproc: int,
    log_dir: str | Path | None = None,
    nodes: int = 1,
    rendezvous: str | None = None,
    run_id: str = "prl",
) -> list[str]:
    """``nproc`` ranks on this host of ``target`` (``["-m", module, *args]`` or a script and
    its arguments). One node meets nobody (``--standalone``); with ``rendezvous``
    (``host:port``) the ranks of ``nodes`` nodes meet there under ``run_id``. ``log_dir``
    keeps each rank's output in files under it as well as on the console."""
    cmd = [sys.executable, "-m", "prl.torchrun"]
    if rendezvous is None:
        if nodes != 1:
            raise ValueError("torchrun across nodes needs a rendezvous host:port")
        cmd.append("--standalone")
    else:
        cmd += [f"--nnodes={nodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={rendezvous}", f"--rdzv-id={run_id}"]
    cmd.append(f"--nproc-per-node={nproc}")
    if log_dir is not None:
        # --tee keeps the ranks' output on the console as well as in the per-rank files.
        cmd += [f"--log-dir={log_dir}", "--redirects=3", "--tee=3"]
    return cmd + list(target)


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
