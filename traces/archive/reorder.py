"""Start order from completion order, in memory bounded by bytes.

Capture and replay files hold records in completion order: a record is written when
its exchange ends, so it can follow a later-starting one by up to its own duration.
Reading them in start order means holding records back for a window of time. What
bounds that memory is a byte budget, not the window: past the budget the oldest
records held go out early, and a record that then arrives older than one already
out is passed through late and counted (docs/archive-format.md, "Memory").
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator
from typing import Any

from tailreplay.errors import UsageError
from tailreplay.traces.archive import format as fmt
from tailreplay.traces.archive.capture_header import CaptureHeader
from tailreplay.traces.archive.scan import FileScan
from tailreplay.units import parse_size

__all__ = ["BUDGET_ENV", "DEFAULT_REORDER_WINDOW_NS", "Reorder", "read_budget", "window_ns"]

BUDGET_ENV = "TAILREPLAY_READ_BUDGET"

# Without a promise of order, records arrive in completion order: a record can come
# up to its duration after a later-starting one. Writers that know their timeout say
# so in the header (capture.timeout_s); otherwise assume this much.
DEFAULT_REORDER_WINDOW_NS = 15 * 60 * 10**9


def read_budget() -> int:
    """The bytes a reader may hold for re-ordering: ``TAILREPLAY_READ_BUDGET``
    (e.g. ``1GiB``), else ``format.DEFAULT_READ_BUDGET`` (256 MiB)."""
    text = os.environ.get(BUDGET_ENV, "").strip()
    if not text:
        return fmt.DEFAULT_READ_BUDGET
    try:
        budget = parse_size(text)
    except UsageError:
        raise UsageError(f"{BUDGET_ENV}={text!r}: not a size (use e.g. 512MiB, 2GiB)") from None
    if budget <= 0:
        raise UsageError(f"{BUDGET_ENV}={text!r}: must be more than 0 bytes")
    return budget


def window_ns(header: dict[str, Any]) -> int:
    """How far back in start time a record of this file can come: 0 for ordered files."""
    if header.get("ordered") is True:
        return 0
    capture = CaptureHeader.read(header)
    if capture is not None and capture.timeout_s is not None:
        return int(capture.timeout_s * 1e9) + 60 * 10**9
    return DEFAULT_REORDER_WINDOW_NS


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} bytes"


class Reorder:
    """Re-ordering for one reader: every file's window shares one byte budget."""

    def __init__(self, budget: int | None = None) -> None:
        self.budget = read_budget() if budget is None else budget
        self.held = 0
        """Bytes (an upper bound) of the records held back right now, in every file."""
        self.late = 0
        """Records that arrived later than the window allowed (yielded anyway)."""
        self.cut_short = False
        """The budget made some window let records go before their time."""
        self.largest = 0
        """The largest record cost seen. Three times it is kept free of held records:
        reading the next record takes its raw bytes and the unpacker's copy of them,
        while the consumer may still hold the one before."""

    def warnings(self) -> list[str]:
        if not self.late:
            return []
        line = f"{self.late} records were out of time order beyond the reorder window"
        if self.cut_short:
            line += (
                f" (the records inside the window exceeded the read budget of "
                f"{_size(self.budget)}; set {BUDGET_ENV}, e.g. =2GiB, to hold more)"
            )
        return [line]

    def in_time_order(self, scan: FileScan, window: int) -> Iterator[dict[str, Any]]:
        """The records of ``scan`` in start order, as far as ``window`` and the budget allow.

        A record is written when its exchange completes, so every later record in the
        file started no earlier than (latest completion seen) - (window). Records older
        than that watermark can safely go out; so can the oldest whenever the records
        held exceed the budget.
        """
        if window == 0:
            yield from self._check_order(scan.records())
            return
        heap: list[tuple[int, int, dict[str, Any], int]] = []
        seq = 0
        watermark = last_out = -(1 << 63)
        try:
            for m in scan.records():
                start = m["start_ns"]
                done = start + (m.get("duration_ns") or 0)
                if done > watermark:
                    watermark = done
                if start < last_out:
                    self.late += 1
                    yield m
                    continue
                cost = scan.cost
                heapq.heappush(heap, (start, seq, m, cost))
                seq += 1
                self.held += cost
                if cost > self.largest:
                    self.largest = cost
                limit = watermark - window
                room = self.budget - 3 * self.largest
                while heap and (heap[0][0] <= limit or self.held > room):
                    if heap[0][0] > limit:
                        self.cut_short = True
                    last_out, _, out, cost = heapq.heappop(heap)
                    self.held -= cost
                    yield out
            while heap:
                _, _, out, cost = heapq.heappop(heap)
                self.held -= cost
                yield out
        finally:
            self.held -= sum(item[3] for item in heap)  # a consumer that stopped early

    def _check_order(self, maps: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """A file that promises order: pass records through, counting any that break it."""
        last = -(1 << 63)
        for m in maps:
            start = m["start_ns"]
            if start < last:
                self.late += 1
            else:
                last = start
            yield m
