"""An archive file's bytes: opened once it is read, decompressed when it is a zstd
stream, and checked batch by batch (``traces/archive/checked_read.py``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from tailreplay.errors import InputError
from tailreplay.traces.archive.checked_read import CheckedChunks
from tailreplay.traces.archive.zstd_read import (
    Chunk,
    ChunkStream,
    ZstdChunks,
    decompress_budget,
    is_zstd,
)

__all__ = ["check_readable", "compressed", "grew_past", "open_chunks"]

CHUNK = 1 << 20


def check_readable(path: Path) -> None:
    """One clear error for a path that cannot be read as a file."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied")
    if not path.is_file():
        raise _not_a_file(path)


def _not_a_file(path: Path) -> InputError:
    # Archives are read more than once (a header, then the records; a replay plans in
    # passes), which a pipe or a device cannot give.
    return InputError(f"{path}: not a regular file (a pipe or a device); save it to a file first")


def open_chunks(path: Path, chunk_size: int = CHUNK) -> CheckedChunks:
    """The file's record stream in chunks: decompressed (and bounded: ``zstd_read.py``)
    when it is a zstd stream, each batch of a version-2 file checked
    (``checked_read.py``). The stream may stop at damage: see ``damage``. The file is
    opened at the first read: a set of files read one after another holds one open."""
    return CheckedChunks(_LazyChunks(path, chunk_size), chunk_size)


class _LazyChunks(ChunkStream):
    """``open_chunks``'s stream: the file's own, opened when first asked for a chunk."""

    def __init__(self, path: Path, chunk_size: int) -> None:
        self._path = path
        self._chunk_size = chunk_size
        self._stream: ChunkStream | None = None

    def __next__(self) -> Chunk:
        if self._stream is None:
            self._stream = _open_stream(self._path, self._chunk_size)
        try:
            return next(self._stream)
        except StopIteration:
            self.damage = self._stream.damage
            raise

    def resume(self) -> bool:
        if self._stream is None or not self._stream.resume():
            return False
        self.damage = None
        return True

    def file_offset(self, offset: int) -> int:
        return offset if self._stream is None else self._stream.file_offset(offset)

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()


def _open_stream(path: Path, chunk_size: int) -> ChunkStream:
    try:
        f: BinaryIO = open(path, "rb")  # noqa: SIM115 - the stream closes it at its end
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from exc
    try:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise _not_a_file(path)
        magic = f.read(4)
        f.seek(0)
        if is_zstd(magic):
            return ZstdChunks(f, chunk_size, decompress_budget())
        return ChunkStream(f, chunk_size)
    except BaseException:
        f.close()
        raise


def grew_past(path: Path, read: int) -> bool:
    """Whether an uncompressed file now holds more than the ``read`` bytes a scan saw
    (the writer appended after the scan's last read: its tail was being written)."""
    try:
        with open(path, "rb") as f:
            if is_zstd(f.read(4)):  # offsets are of the decompressed stream
                return False
            return os.fstat(f.fileno()).st_size > read
    except OSError:
        return False


def compressed(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return is_zstd(f.read(4))
    except OSError:
        return False
