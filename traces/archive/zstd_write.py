"""How the archive writer puts a compressed file's batches on disk: one zstd frame a
batch, behind its frame check (docs/archive-format.md, "Checksums")."""

from __future__ import annotations

from typing import BinaryIO

import zstandard

from tailreplay.traces.archive.checksums import frame_check
from tailreplay.traces.archive.whole_writes import WholeWrites

__all__ = ["FrameWriter"]


class FrameWriter:
    """Writes each piece of data it is given as one zstd frame (with its content size
    and zstd's content checksum) after that frame's check, whole or not at all.

    Frames are made by a compression object told the size ahead, not by
    ``compress()``: the one-shot call cuts incompressible data (request bodies) into
    ~7 KiB blocks, and a reader walks every block (docs/benchmarks.md).
    """

    __slots__ = ("_compressor", "_file")

    def __init__(self, file: BinaryIO) -> None:
        self._file = WholeWrites(file)
        self._compressor = zstandard.ZstdCompressor(level=3, write_checksum=True)

    def write(self, data: bytes) -> None:
        obj = self._compressor.compressobj(size=len(data))
        frame = obj.compress(data) + obj.flush()
        self._file.write(frame_check(frame) + frame)
