"""``prl inference --slurm``: an inference server as a SLURM job of its own.

The job's plan holds the one server process, which serves until the job is cancelled
(Ctrl-C in the submitting command, or ``scancel``). It listens on every interface of its
node so that clients elsewhere reach it, and prl's server refuses that without an API key
for its admin routes (weight updates, LoRA loading): :func:`with_api_key` gives it the
user's (``server.api_key`` or ``$PRL_API_KEY``) or else one made for this job, kept in
``<run>/launcher/api_key`` (readable by you only).

Once the job runs, :class:`ServerAddress` turns the URL the server writes to its ready file
(on the run directory's shared storage) into the one clients use: the node's address
(SLURM's ``NodeAddr``) in place of a wildcard bind, and the port the server really bound
(``server.port = 0`` picks a free one on the node).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from urllib.parse import urlsplit

from prl.contracts.launcher import ProcessSpec
from prl_launcher_slurm.script import engine_key

WILDCARD = {"0.0.0.0", "::", ""}


def with_api_key(processes: list[ProcessSpec], root, out: Path) -> list[ProcessSpec]:
    """``processes`` with ``$PRL_API_KEY`` set when the job needs a key of its own (the key
    is also written to ``out/api_key``, mode 0600); unchanged when the user gave one."""
    path = out / "api_key"
    path.unlink(missing_ok=True)  # an earlier dry run's, which a key given since replaces
    key = engine_key(root)
    if key is None:
        return processes
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key + "\n")
    return [dataclasses.replace(p, env={**p.env, "PRL_API_KEY": key}) for p in processes]


class ServerAddress:
    """Called with the job's node list while it runs: the line that says where clients reach
    the server once it serves (also written to ``out/server_url``), else None."""

    def __init__(self, job_id: str, ready_file: Path, out: Path) -> None:
        self.job_id = job_id
        self.ready_file = Path(ready_file)
        self.out = out

    def __call__(self, nodes: str) -> str | None:
        try:
            bound = urlsplit(self.ready_file.read_text().strip())
        except FileNotFoundError:
            return None
        if bound.port is None:  # not written yet (an empty or partial file)
            return None
        node = nodes.split(",")[0]
        host = bound.hostname or ""
        if host in WILDCARD:
            # Imported here: the job runs ``python -m prl_launcher_slurm.node``, which must not
            # be imported already when the package loads.
            from prl_launcher_slurm.node import node_addr

            host = node_addr(node)
        url = f"http://{'[' + host + ']' if ':' in host else host}:{bound.port}"
        (self.out / "server_url").write_text(url + "\n")
        key = self.out / "api_key"
        admin = f"; admin routes need the key in {key}" if key.exists() else ""
        return (
            f"prl: inference server of SLURM job {self.job_id} is up at {url} (node {node}){admin}; "
            f"Ctrl-C cancels the job"
        )
