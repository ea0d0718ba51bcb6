"""When each request of the schedule is due: its recorded offset from the first start
(each tick's requests placed in the tick when the clock is quantised), dilated by
the speed; copies of ``--amplify`` a few milliseconds apart, or spread in the tick."""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from tailreplay.replayer.speed import Shape
from tailreplay.replayer.ticks import Ticks, place_fraction, tick_floor, tick_phase

__all__ = ["AMPLIFY_JITTER_S", "DueTimes", "u64"]

AMPLIFY_JITTER_S = 0.010
"""Extra copies of a request (--amplify) go out within this much after the original."""


def u64(*parts: bytes) -> int:
    """A 64-bit draw from ``parts``: the same in every shard and every run."""
    return int.from_bytes(hashlib.blake2b(b"\x00".join(parts), digest_size=8).digest(), "big")


_TICKS_KEPT = 4_096
"""Ticks whose places ``DueTimes`` remembers (a record later than that many ticks
out of order may share a place, and so a send time, with another)."""


class DueTimes:
    """Due offsets: the recorded offset from the first start, dilated by --speed.

    When the schedule spreads ticks, a request's recorded time is the start of its
    tick plus a fraction of the tick from the seed and the copy's place among its
    tick's copies (``ticks.place_fraction``; every shard counts every record)."""

    def __init__(
        self,
        first_start_ns: int,
        span_s: float,
        ticks: Ticks | None,
        speed: Shape,
        seed: bytes,
        copies: int,
        *,
        placement: str = "random",
    ) -> None:
        self.copies = copies
        self.placement = placement
        """How a tick's requests are placed in it (``ticks.PLACEMENTS``)."""
        """The most copies of one record (``--amplify`` rounded up)."""
        self.first = first_start_ns
        self.span_s = span_s
        self.speed = speed
        self.seed = seed
        self.ticks = ticks
        """The tick each tick's requests are spread over; None: sent as recorded."""
        self._start = -1
        """The current record's tick (or start): -1 before the first (a start is >= 0)."""
        self._index = 0
        self._earliest = 0.0
        self._phase = 0.0
        """The current tick's seeded phase (``ticks.tick_phase``)."""
        self._places: OrderedDict[int, int] = OrderedDict()
        """Per recent tick, the places taken in it: a record read after later ticks
        (out of start order) takes the next place in its own tick, not the first."""

    def earliest(self, start_ns: int) -> float:
        """The earliest due offset of a record starting at ``start_ns`` (and of every
        record after it, read in start order); call once per record, in read order."""
        if self.ticks is not None:
            floor = tick_floor(start_ns, self.ticks)
            if floor == self._start:
                self._index += 1
            else:
                self._enter(floor)
            start_ns = floor
        self._start = start_ns
        self._earliest = self.speed.replay_offset((start_ns - self.first) / 1e9, self.span_s)
        return self._earliest

    def _enter(self, floor: int) -> None:
        """The records move to the tick at ``floor``: the one left keeps its count of
        places, and a tick seen before (a record out of start order) resumes its own."""
        if self._start >= 0:
            self._places[self._start] = self._index + 1
        if len(self._places) > _TICKS_KEPT:
            self._places.popitem(last=False)
        self._index = self._places.pop(floor, 0)
        self._phase = tick_phase(floor, self.seed)

    def due(self, key: bytes, copy: int) -> float:
        """The due offset of copy ``copy`` of the record last passed to ``earliest``."""
        if self.ticks is None:
            if copy == 0:
                return self._earliest
            jitter = u64(key, self.seed, bytes([copy % 256])) / 2**64
            return self._earliest + AMPLIFY_JITTER_S * jitter
        place = self._index * self.copies + copy
        u = place_fraction(self.placement, self._start, self._phase, self.seed, place)
        recorded_ns = self._start - self.first + u * self.ticks.tick_ns
        return self.speed.replay_offset(recorded_ns / 1e9, self.span_s)
