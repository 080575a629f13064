"""Atomic file writes: every file another process polls for (batches, address and ready
files, progress checkpoints) is written under a temporary name and renamed into place, so a
reader sees either nothing or the whole file."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: str | bytes, fsync: bool = False) -> Path:
    """Write ``data`` to ``path`` via a same-directory temp file and ``os.replace``.

    ``fsync`` also flushes the bytes to disk before the rename (checkpoints that must survive
    a machine crash, not only a process crash).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk must not keep the partial copy too
        raise
    return path
