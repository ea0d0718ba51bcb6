"""Counts of positive values in bins 1% wide (relative), for series too long to keep.

Inter-token gaps run to hundreds per request; a million requests would need hundreds
of millions of values in memory. Percentiles read off these bins are within 1% of the
exact ones (the bin's geometric middle is reported). The bins are
``tailreplay/http/sse.py``'s, the ones a long stream's gaps are recorded in
(``chunk_gaps_more``), so those add in as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.http.sse import GROWTH, bin_middle
from tailreplay.traces.results.figures import PERCENTILES

__all__ = ["LogHistogram"]

Array = npt.NDArray[Any]
_LOG = float(np.log(GROWTH))
_PER_VALUE = 1 << 20
"""Integers below this are counted per value (a count array of at most 8 MiB)."""


def _bins(positive: Array) -> Array:
    """The bin of each positive value (float64); bin 0 holds values below 1 (all the
    same to a µs clock)."""
    bins: Array = np.maximum(np.floor(np.log(positive) / _LOG).astype(np.int64) + 1, 0)
    return bins


class LogHistogram:
    """Values added one by one (``add``) or as recorded bins (``add_bins``); read as
    percentiles."""

    def __init__(self) -> None:
        self.counts: Array = np.zeros(0, dtype=np.int64)
        self.zeros = 0
        """Values of 0 (chunks that arrived together in one read)."""

    @property
    def total(self) -> int:
        return int(self.counts.sum()) + self.zeros

    def add(self, values: Array) -> None:
        values = np.asarray(values)
        if values.dtype.kind in "iu" and values.size:
            # Integers (µs gaps) below a bound are counted per value first, and each
            # distinct value binned once: a fraction of the logarithms, same bins.
            small = values < _PER_VALUE
            if small.all() and values.min() >= 0:
                self._add_per_value(np.bincount(values))
                return
            if values.min() >= 0:
                self._add_per_value(np.bincount(values[small]))
                values = values[~small]
        values = np.asarray(values, dtype=np.float64)
        positive = values[values > 0]
        self.zeros += int(values.size - positive.size)
        if positive.size == 0:
            return
        self._count(np.bincount(_bins(positive)))

    def _add_per_value(self, per_value: Array) -> None:
        """Add ``per_value[v]`` values of ``v``, for each integer ``v``."""
        self.zeros += int(per_value[:1].sum())
        if per_value.size < 2:
            return
        bins = _bins(np.arange(1, per_value.size, dtype=np.float64))
        # Bins grow with the value: sum each run of equal bins, exactly (integers).
        starts = np.flatnonzero(np.diff(bins, prepend=-1))
        counts = np.zeros(int(bins[-1]) + 1, dtype=np.int64)
        counts[bins[starts]] = np.add.reduceat(per_value[1:].astype(np.int64), starts)
        self._count(counts)

    def merge(self, other: LogHistogram) -> None:
        """Add every value ``other`` holds."""
        self.zeros += other.zeros
        if other.counts.size:
            self._count(other.counts.copy())

    def add_bins(self, flat: Sequence[int]) -> None:
        """Recorded bins, ``[bin, count, ...]`` (bin -1: values of 0); a lone last
        number, or a bin past what any gap reaches, is ignored."""
        pairs = np.asarray(flat[: len(flat) // 2 * 2], dtype=np.int64).reshape(-1, 2)
        pairs = pairs[(pairs[:, 0] < 4096) & (pairs[:, 1] > 0)]  # 1.01^4096 µs: years
        self.zeros += int(pairs[pairs[:, 0] < 0, 1].sum())
        kept = pairs[pairs[:, 0] >= 0]
        if kept.size:
            self._count(np.bincount(kept[:, 0], weights=kept[:, 1]).astype(np.int64))

    def _count(self, counts: Array) -> None:
        if counts.size > self.counts.size:
            counts[: self.counts.size] += self.counts
            self.counts = counts
        else:
            self.counts[: counts.size] += counts

    def percentiles(self, which: Mapping[str, float] = PERCENTILES) -> dict[str, float] | None:
        """Named percentiles (each its bin's middle); None when empty."""
        total = self.total
        if total == 0:
            return None
        cumulative = np.cumsum(self.counts) + self.zeros
        out = {}
        for name, pct in which.items():
            rank = pct / 100.0 * total
            if rank <= self.zeros:
                out[name] = 0.0
                continue
            out[name] = float(bin_middle(int(np.searchsorted(cumulative, rank))))
        return out

    def max(self) -> float:
        """The largest value's bin's upper end (0 when there are none but zeros)."""
        nonzero = np.flatnonzero(self.counts)
        return float(GROWTH ** int(nonzero[-1])) if nonzero.size else 0.0
