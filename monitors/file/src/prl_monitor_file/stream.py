"""The chunked trace stream: ``traces/stream/NNNNN.jsonl`` plus ``traces/stream.index.jsonl``.

Every finished episode is one JSON line appended to the active chunk, and one summary row
(with the chunk number and the byte offset of the line in the uncompressed chunk) appended
to the index. Once a chunk reaches ``chunk_bytes`` it is sealed and the next one starts;
with ``compress`` the sealed chunk becomes ``NNNNN.jsonl.zst`` in the zstd *seekable* format:
independent frames of 1 MiB of input each, then a skippable frame holding the seek table
(per frame: compressed size, decompressed size; footer: frame count, descriptor, magic
0x8F92EAB1). Any zstd tool decompresses the whole file; a reader of the index jumps to
the frame that holds an offset without inflating the chunk (:func:`read_trace`).

Compression (on by default) uses the ``zstandard`` package, a dependency of this member.
Should it be missing, ``compress = true`` logs one warning and sealed chunks stay plain ``.jsonl``.

The same chunked layout carries per-token annotations, one stream per producer
(``annotations/<producer>/NNNNN.jsonl`` with ``annotations/<producer>.index.jsonl``): a
:class:`TraceStream` is named by ``name`` and builds its index rows with ``index``.

Several producers (orchestrator, eval) may share one stream: every append and every seal
runs under an exclusive ``flock`` on ``traces/stream.lock``, and a writer whose chunk was
sealed by another process moves on to the newest chunk.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prl_monitor_file.records import index_row, round_floats

log = logging.getLogger("prl.monitors.file")

FRAME_BYTES = 1 << 20
SKIPPABLE_MAGIC = 0x184D2A5E
SEEKABLE_MAGIC = 0x8F92EAB1
_CHUNK = re.compile(r"^(\d{5,})\.jsonl(\.zst)?$")


def zstd_available() -> bool:
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True


class TraceStream:
    """Appends episodes to the active chunk and the index; seals full chunks."""

    def __init__(
        self,
        root: Path,
        chunk_bytes: int,
        compress: bool,
        float_decimals: int,
        name: str = "stream",
        index: Callable[[dict[str, Any], int | None, int, int], dict[str, Any]] = index_row,
    ) -> None:
        self.root = root
        self.name = name
        self.index = index
        self.dir = root / name
        self.chunk_bytes = chunk_bytes
        self.compress = compress and zstd_available()
        self.decimals = float_decimals
        self._chunk: int | None = None
        self._fd: int | None = None
        if compress and not self.compress:
            log.warning("file monitor: compress=true needs the 'zstandard' package; sealed chunks stay uncompressed")

    def append(self, traces: list[dict[str, Any]], step: int | None) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._locked():
            rows = []
            for trace in traces:
                fd = self._active_fd()
                line = (json.dumps(round_floats(trace, self.decimals), separators=(",", ":")) + "\n").encode()
                offset = os.fstat(fd).st_size
                os.write(fd, line)
                rows.append(self.index(trace, step, self._chunk, offset))
                if offset + len(line) >= self.chunk_bytes:
                    self._seal()
            index = b"".join((json.dumps(r, separators=(",", ":")) + "\n").encode() for r in rows)
            _append_bytes(self.root / f"{self.name}.index.jsonl", index)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _active_fd(self) -> int:
        """The fd of the newest unsealed chunk, reopened if another writer sealed ours."""
        newest, sealed = _newest_chunk(self.dir, self.chunk_bytes)
        target = newest + 1 if sealed else max(newest, 0)
        if self._fd is not None and self._chunk == target:
            return self._fd
        self.close()
        self._chunk = target
        self._fd = os.open(chunk_path(self.dir, target, False), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self._fd

    def _seal(self) -> None:
        chunk = self._chunk
        self.close()
        # a plain chunk counts as sealed by its size alone (see _newest_chunk)
        if self.compress and chunk is not None:
            compress_seekable(chunk_path(self.dir, chunk, False), chunk_path(self.dir, chunk, True))

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.root / f"{self.name}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def chunk_path(stream_dir: Path, chunk: int, compressed: bool) -> Path:
    return stream_dir / (f"{chunk:05d}.jsonl" + (".zst" if compressed else ""))


def _newest_chunk(stream_dir: Path, chunk_bytes: int) -> tuple[int, bool]:
    """(number of the newest chunk or -1, whether it is sealed).

    A chunk is sealed once it is compressed or, left plain, once it reached ``chunk_bytes``.
    """
    compressed: dict[int, bool] = {}
    for entry in os.listdir(stream_dir):
        match = _CHUNK.match(entry)
        if match:
            n = int(match.group(1))
            compressed[n] = compressed.get(n, False) or bool(match.group(2))
    if not compressed:
        return -1, False
    newest = max(compressed)
    if compressed[newest]:
        return newest, True
    return newest, os.path.getsize(chunk_path(stream_dir, newest, False)) >= chunk_bytes


def _append_bytes(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def compress_seekable(src: Path, dst: Path, frame_bytes: int | None = None) -> None:
    """Write ``src`` as a seekable zstd file ``dst`` (atomically), then remove ``src``."""
    import zstandard

    frame_bytes = frame_bytes or FRAME_BYTES
    cctx = zstandard.ZstdCompressor(level=3, write_content_size=True)
    entries: list[tuple[int, int]] = []
    tmp = dst.with_name(dst.name + ".tmp")
    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        while block := fin.read(frame_bytes):
            frame = cctx.compress(block)
            fout.write(frame)
            entries.append((len(frame), len(block)))
        table = b"".join(struct.pack("<II", c, d) for c, d in entries)
        footer = struct.pack("<IBI", len(entries), 0, SEEKABLE_MAGIC)
        fout.write(struct.pack("<II", SKIPPABLE_MAGIC, len(table) + len(footer)) + table + footer)
        fout.flush()
        os.fsync(fout.fileno())
    os.replace(tmp, dst)
    src.unlink()


def read_trace(stream_dir: Path, chunk: int, offset: int) -> dict[str, Any]:
    """The episode at ``offset`` of ``chunk`` (plain or seekable-zstd), from an index row."""
    plain = chunk_path(stream_dir, chunk, False)
    if plain.exists():
        with open(plain, "rb") as f:
            f.seek(offset)
            return json.loads(f.readline())
    return json.loads(_read_seekable_line(chunk_path(stream_dir, chunk, True), offset))


def _read_seekable_line(path: Path, offset: int) -> bytes:
    import zstandard

    data = path.read_bytes()
    count, _, magic = struct.unpack("<IBI", data[-9:])
    if magic != SEEKABLE_MAGIC:
        raise ValueError(f"{path} is not a seekable zstd file")
    table_start = len(data) - 9 - 8 * count
    entries = [struct.unpack_from("<II", data, table_start + 8 * i) for i in range(count)]
    dctx = zstandard.ZstdDecompressor()
    pos = skipped = 0
    start: int | None = None
    buf = b""
    for comp, decomp in entries:
        frame = data[pos : pos + comp]
        pos += comp
        if start is None:
            if skipped + decomp <= offset:  # the line starts in a later frame
                skipped += decomp
                continue
            start = offset - skipped
        buf += dctx.decompress(frame)
        if b"\n" in buf[start:]:
            break
    if start is None:
        raise ValueError(f"offset {offset} is past the end of {path}")
    return buf[start : buf.index(b"\n", start) + 1]
