"""The C column scanner (``_colscan.c``) over one archive file's record stream.

``scan_file`` hands each call's records on as a ``Scanned``: equal-length columns of
the fields asked for, with no Python object made per record. It says whether it took
the file whole; a file it cannot take (damage, a torn tail, an invalid or unusual
record, or no C scanner built) is the careful pure-Python reader's
(``traces/archive/scan.py``), which owns every verdict, warning and error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import numpy.typing as npt

from tailreplay.traces.archive import format as fmt
from tailreplay.traces.archive.file_bytes import open_chunks
from tailreplay.traces.archive.validate import COLSCAN_SPECS
from tailreplay.traces.archive.zstd_read import Chunk

try:
    from tailreplay.traces.archive import _colscan  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: the pure-Python path does the job
    _colscan = None

__all__ = ["Scanned", "scan_file"]

Array = npt.NDArray[Any]

_LIMITS = (
    fmt.MAX_STR_LEN,
    fmt.MAX_BIN_LEN,
    fmt.MAX_ARRAY_LEN,
    fmt.MAX_MAP_LEN,
    fmt.MAX_RECORD_BYTES,
    fmt.MAX_RECORD_OBJECTS,
)


@dataclass
class Scanned:
    """The records one scanner call read, as columns (valid while the caller's hook runs).

    ``values[:, j]`` and ``present[:, j]`` are the field ``names[j]``'s (int64, 0 where
    absent; 1 where present); ``extras[j]`` a valued fixed-size bin's bytes or an
    array's items (``_colscan.c`` says how); ``starts`` where each record begins in
    ``data``, the last one ending at ``end``.
    """

    data: Chunk
    end: int
    values: Array
    present: Array
    extras: tuple[bytes, ...]
    starts: Array

    @property
    def count(self) -> int:
        return len(self.starts)

    def record(self, i: int) -> dict[str, Any]:
        """Record ``i`` as a map (the scanner checked it: it unpacks as the reader's)."""
        stop = int(self.starts[i + 1]) if i + 1 < self.count else self.end
        with memoryview(self.data) as view:
            record: dict[str, Any] = msgpack.unpackb(view[int(self.starts[i]) : stop], raw=False)
        return record


def scan_file(
    path: Path,
    names: tuple[str, ...],
    nvalued: int,
    take: Callable[[Scanned], None],
    *,
    strings: dict[bytes, int] | None = None,
    max_records: int = 1 << 20,
    max_items: int = 1 << 22,
) -> bool:
    """Scan every record of ``path`` (C scanner): ``names[:nvalued]`` valued, the rest
    presence-only, ``strings`` the table str values are coded into. True when the file
    was taken whole; False when the careful reader must read it (what ``take`` got is
    then no account of the file)."""
    if _colscan is None:
        return False
    keys = tuple(f.encode() for f in names)

    def scan(buf: Chunk, offset: int) -> tuple[int, int]:
        end, _, vals, pres, status, extras, starts = _colscan.scan(
            buf, offset, keys, nvalued, COLSCAN_SPECS, _LIMITS, max_records, strings, max_items
        )
        take(
            Scanned(
                buf,
                end,
                np.frombuffer(vals, dtype=np.int64).reshape(-1, len(keys)),
                np.frombuffer(pres, dtype=np.uint8).reshape(-1, len(keys)),
                extras,
                np.frombuffer(starts, dtype=np.int64),
            )
        )
        return end, status

    # Chunked reads, not mmap: mapped file pages count as the process's memory, and
    # a 5M-record archive is hundreds of MB.
    stream = open_chunks(path, chunk_size=8 << 20)
    try:
        ok = _scan_chunks(stream, scan)
    finally:
        stream.close()
    return ok and stream.damage is None  # damaged compressed data: Python reports it


def _header_end(data: Any) -> int | None:
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=fmt.MAX_RECORD_BYTES)
    unpacker.feed(data[: min(len(data), 1 << 20)])
    try:
        unpacker.unpack()
    except (msgpack.OutOfData, ValueError):
        return None
    offset: int = unpacker.tell()
    return offset


def _scan_chunks(chunks: Iterator[Chunk], scan: Callable[[Chunk, int], tuple[int, int]]) -> bool:
    # A chunk is scanned where it lies; only a record split across chunks is copied
    # (into ``pending``, which grows in place while a big record comes in).
    pending = bytearray()
    header_read = False
    for chunk in chunks:
        if pending:
            pending += chunk
        buf: Chunk = pending if pending else chunk
        offset = 0
        if not header_read:
            end = _header_end(buf)
            if end is None:
                if buf is chunk:
                    pending = bytearray(chunk)
                if len(pending) > fmt.MAX_RECORD_BYTES:
                    return False
                continue
            header_read, offset = True, end
        status = 2
        while status == 2:
            offset, status = scan(buf, offset)
        if buf is pending:
            del pending[:offset]
        elif offset < len(chunk):
            pending = bytearray(memoryview(chunk)[offset:])
        if len(pending) > fmt.MAX_RECORD_BYTES:
            return False  # not a record split across chunks: damage; let Python report it
    return header_read and not pending
