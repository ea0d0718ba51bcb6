"""WholeWrites: a file whose ``write`` writes everything or raises, for the compressed
archive writer (``traces/archive/writer.py``)."""

from __future__ import annotations

import errno
from typing import BinaryIO

__all__ = ["WholeWrites"]


class WholeWrites:
    """A file whose ``write`` writes all it is given or raises. A compressed frame written
    in part (a disk filling up) and then followed by the next would lose bytes from the
    middle of the stream, and records after them would be counted written but unreadable
    once space came back; here the rest is tried again, and a disk still full raises."""

    __slots__ = ("_file",)

    def __init__(self, file: BinaryIO) -> None:
        self._file = file

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        done = 0
        while done < len(view):
            n = self._file.write(view[done:])
            if not n:
                raise OSError(errno.ENOSPC, "no space left: a write made no progress")
            done += n
        return done

    def flush(self) -> None:
        self._file.flush()
