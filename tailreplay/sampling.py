"""Consistent sampling by trace id that never drops what matters (errors, the tail).

Shared by the proxy's ``--sample`` (which records to keep) and ``--trace-sample``
(which spans to export) on the proxy and the replayer. The decision depends
only on the trace id, so every process using the same share keeps the same
traces — a trace is whole or absent, never half-sampled.
"""

from __future__ import annotations

from collections import deque

import numpy as np

__all__ = ["RunningP99", "TraceSampler", "in_share", "share_threshold"]


def share_threshold(share: float) -> int:
    """The bound ``in_share`` compares a trace id with, for a share in (0, 1]."""
    return int(share * 2**64)


def in_share(trace_id: bytes, threshold: int) -> bool:
    """Whether a trace falls in the share ``threshold`` stands for. The first 8 bytes of
    a W3C trace id are random (version 00 ids are all random), so a share of the
    traces is that share of them whatever their order, and the same ones every time
    (the proxy's ``--sample`` and ``--shadow-share``, and the report that checks it)."""
    return threshold >= 2**64 or int.from_bytes(trace_id[:8], "big") < threshold


class TraceSampler:
    """Keep ``rate`` of traces by id, plus every error and every tail request."""

    def __init__(self, rate: float) -> None:
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"sampling rate {rate} is not in (0, 1]")
        self.rate = rate
        self._threshold = share_threshold(rate)

    def keep(self, trace_id: bytes | None, *, error: bool = False, tail: bool = False) -> bool:
        if trace_id is None or error or tail:
            return True
        return in_share(trace_id, self._threshold)


class RunningP99:
    """P99 of the last 2,048 durations, refreshed every 256 (cheap, and it adapts).

    ``is_tail`` answers for a live stream of requests what the replayer answers
    over a whole archive: is this request at or above the P99?
    """

    def __init__(self) -> None:
        self._recent: deque[int] = deque(maxlen=2048)
        self._count = 0
        self.value: float | None = None

    def add(self, duration_ns: int) -> None:
        self._recent.append(duration_ns)
        self._count += 1
        if self._count % 256 == 0 or (self.value is None and self._count >= 100):
            self.value = float(np.percentile(np.fromiter(self._recent, dtype=np.int64), 99))

    def is_tail(self, duration_ns: int | None) -> bool:
        """Add ``duration_ns`` and say whether it is at or above the running P99."""
        if duration_ns is None:
            return False
        self.add(duration_ns)
        return self.value is not None and duration_ns >= self.value
