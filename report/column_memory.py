"""Columns built chunk by chunk in memory of their own.

A side's columns grow a chunk of records at a time. Built as numpy pieces joined at
the end, the pieces' memory goes back to the C allocator's heap, below the joined
columns, where the process keeps it: on glibc a side cost about twice its columns.
Here each column lives in an anonymous memory map, grown by doubling; a map let go
returns to the system whole, and pages a map reserves but nothing writes are never
resident.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["GrowingColumn", "joined"]

Array = npt.NDArray[Any]

_FIRST = 1 << 12
"""Items the first map of a column holds."""


def _mapped(n: int, dtype: np.dtype[Any]) -> Array:
    """A writable array of ``n`` items in a map of its own."""
    if n == 0:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(mmap.mmap(-1, n * dtype.itemsize), dtype=dtype, count=n)


class GrowingColumn:
    """One column, appended to a chunk's worth at a time."""

    def __init__(self, dtype: npt.DTypeLike) -> None:
        self.dtype = np.dtype(dtype)
        self.n = 0
        self._buf = _mapped(0, self.dtype)

    def append(self, values: Array, rows: Array, expected: int = 0) -> None:
        """Append ``values[rows]``; ``expected``: about how many items the column will
        hold (grown to that at once, each page is written once, not copied at each
        doubling)."""
        end = self.n + rows.size
        if end > self._buf.size:
            grown = _mapped(max(end, 2 * self._buf.size, _FIRST, expected), self.dtype)
            grown[: self.n] = self._buf[: self.n]
            self._buf = grown  # the old map goes back to the system with its last view
        np.take(values, rows, out=self._buf[self.n : end])
        self.n = end

    def array(self) -> Array:
        """The column as it stands (a view of its map)."""
        return self._buf[: self.n]


def joined(columns: Sequence[GrowingColumn], dtype: npt.DTypeLike) -> Array:
    """The columns one after another, in a map of their own (one column: itself)."""
    if len(columns) == 1:
        return columns[0].array()
    out = _mapped(sum(c.n for c in columns), np.dtype(dtype))
    at = 0
    for column in columns:
        out[at : at + column.n] = column.array()
        at += column.n
    return out
