"""The replay schedule: which records go out, when, and with how much work.

Two streaming passes over the archive. The first (``plan``) loads two columns to
find the replayed set's span and the tail threshold; the second (``schedule``)
yields one ``Planned`` request at a time in due order, so memory does not grow
with the archive. Everything here is arithmetic on recorded data — no clock, no
network — so ``--dry-run`` and the tests see exactly what a live replay sends.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from tailreplay.errors import InputError
from tailreplay.replayer.speed import Speed
from tailreplay.replayer.ticks import Ticks, detect_ticks, spread_fraction, spread_tick, tick_floor
from tailreplay.traces.columns import load_columns
from tailreplay.traces.reader import ArchiveReader
from tailreplay.traces.record import Record

__all__ = ["AMPLIFY_JITTER_S", "Plan", "Planned", "ScheduleConfig", "plan", "schedule", "shard_of"]

AMPLIFY_JITTER_S = 0.010
"""Extra copies of a request (--amplify) go out within this much after the original."""


@dataclass(frozen=True)
class ScheduleConfig:
    paths: Sequence[str | os.PathLike[str]]
    speed: Speed = field(default_factory=lambda: Speed(1.0, 1.0))
    amplify: float = 1.0
    tail_stretch: float = 1.8
    tail_quantile: float = 0.99
    start_ns: int | None = None
    end_ns: int | None = None
    limit: int | None = None
    shard: tuple[int, int] = (0, 1)
    seed: int = 0
    skip_corrupt: bool = False
    spread_ticks: bool | None = None
    """Spread each tick's requests over the tick (None: when the timestamps are quantised)."""


@dataclass(frozen=True)
class Plan:
    """What the first pass learned about the replayed set (all shards together)."""

    count: int
    first_start_ns: int
    span_s: float
    tail_by: str | None
    """``duration_ns``, ``output_tokens`` (no durations recorded), or None (neither)."""
    tail_threshold: float | None
    tail_count: int
    warnings: list[str] = field(default_factory=list)
    """What reading the archives met: empty files, torn tails, skipped records and bytes."""
    ticks: Ticks | None = None
    """The tick the timestamps were logged at (``replayer/ticks.py``), if any."""
    spread_ns: int | None = None
    """The tick each tick's requests are spread over; None: sent at their recorded times."""


@dataclass(slots=True)
class Planned:
    due_s: float
    """Offset from the replay's start at which this request is due."""
    record: Record
    copy: int
    tail: bool
    budget: int | None
    """Output tokens to ask for (None: unknown, send as recorded)."""

    def __lt__(self, other: Planned) -> bool:  # for the re-ordering heap
        return self.due_s < other.due_s


def _u64(*parts: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(b"\x00".join(parts), digest_size=8).digest(), "big")


def _key(record: Record) -> bytes:
    return record.trace_id or record.start_ns.to_bytes(8, "big", signed=True)


def shard_of(record: Record, shards: int) -> int:
    """The shard a record belongs to: by its trace id, so shards never overlap."""
    return _u64(_key(record), b"shard") % shards


def _window(starts: np.ndarray, config: ScheduleConfig) -> np.ndarray | None:
    """The replayed records as a mask, or None when every record is replayed."""
    if config.start_ns is None and config.end_ns is None and config.limit is None:
        return None
    keep = np.ones(len(starts), dtype=bool)
    if config.start_ns is not None:
        keep &= starts >= config.start_ns
    if config.end_ns is not None:
        keep &= starts < config.end_ns
    if config.limit is not None:
        idx = np.flatnonzero(keep)[config.limit :]
        keep[idx] = False
    return keep


def plan(config: ScheduleConfig) -> Plan:
    """First pass: the replayed set's first start, span and tail threshold."""
    # One value column at a time — durations, else output tokens (imported traces
    # have no latencies): at 5M records each column is 40 MB.
    tail_by: str | None = None
    for name in ("duration_ns", "output_tokens"):
        cols = load_columns(config.paths, [name], skip_corrupt=config.skip_corrupt)
        keep = _window(cols["start_ns"], config)
        has = cols.present[name] if keep is None else cols.present[name] & keep
        if has.any():
            tail_by = name
            break
        if name == "duration_ns":
            del cols, keep, has  # free 100 MB before loading the next column
    # Views when everything is replayed: copies of 5M-record columns cost 40 MB each.
    starts = cols["start_ns"] if keep is None else cols["start_ns"][keep]
    if starts.size == 0:
        raise InputError("no records to replay (check --from/--to/--limit)")
    threshold = None
    tail_count = 0
    if tail_by is not None:
        has = cols.present[tail_by] if keep is None else cols.present[tail_by] & keep
        values = cols[tail_by] if has.all() else cols[tail_by][has]
        threshold = float(np.percentile(values, config.tail_quantile * 100))
        tail_count = int((values >= threshold).sum())
    the_plan = Plan(
        count=int(starts.size),
        first_start_ns=int(starts[0]),
        span_s=float(starts[-1] - starts[0]) / 1e9,
        tail_by=tail_by,
        tail_threshold=threshold,
        tail_count=tail_count,
        warnings=cols.warnings,
    )
    return _with_ticks(the_plan, starts, config.spread_ticks)


def _with_ticks(the_plan: Plan, starts: np.ndarray, wanted: bool | None) -> Plan:
    """The plan with the clock's tick (``replayer/ticks.py``) and, when the schedule
    spreads over it, its span from the first tick's start to the last tick's end."""
    ticks = detect_ticks(starts)
    spread = spread_tick(ticks, wanted)
    if ticks is None or spread is None:
        return replace(the_plan, ticks=ticks)
    first = tick_floor(the_plan.first_start_ns, ticks)
    last = tick_floor(int(starts.max()), ticks) + spread
    return replace(
        the_plan, ticks=ticks, spread_ns=spread, first_start_ns=first, span_s=(last - first) / 1e9
    )


def _budget(record: Record, tail: bool, factor: float) -> int | None:
    base = record.output_tokens if record.output_tokens is not None else record.max_tokens
    if base is None:
        return None
    return math.ceil(factor * base) if tail else base


class _DueTimes:
    """Due offsets: the recorded offset from the first start, dilated by --speed.

    When the schedule spreads ticks, a request's recorded time is the start of its
    tick plus a seeded fraction of the tick, drawn per copy from the record's key, the
    seed and its place among its tick's records (so records without a trace id, whose
    keys are their shared start, still differ; every shard counts every record)."""

    def __init__(self, the_plan: Plan, speed: Speed, seed: bytes) -> None:
        self.first = the_plan.first_start_ns
        self.span_s = the_plan.span_s
        self.speed = speed
        self.seed = seed
        self.ticks = the_plan.ticks if the_plan.spread_ns is not None else None
        self._start = self._index = 0
        self._earliest = 0.0

    def earliest(self, start_ns: int) -> float:
        """The earliest due offset of a record starting at ``start_ns`` (and of every
        record after it, read in start order); call once per record, in read order."""
        if self.ticks is not None:
            floor = tick_floor(start_ns, self.ticks)
            self._index = self._index + 1 if floor == self._start else 0
            start_ns = floor
        self._start = start_ns
        self._earliest = self.speed.replay_offset((start_ns - self.first) / 1e9, self.span_s)
        return self._earliest

    def due(self, key: bytes, copy: int) -> float:
        """The due offset of copy ``copy`` of the record last passed to ``earliest``."""
        if self.ticks is None:
            if copy == 0:
                return self._earliest
            jitter = _u64(key, self.seed, bytes([copy % 256])) / 2**64
            return self._earliest + AMPLIFY_JITTER_S * jitter
        u = spread_fraction(key + self._index.to_bytes(8, "big"), self.seed, copy)
        recorded_ns = self._start - self.first + u * self.ticks.tick_ns
        return self.speed.replay_offset(recorded_ns / 1e9, self.span_s)


def schedule(
    config: ScheduleConfig, the_plan: Plan, warn: Callable[[str], None] | None = None
) -> Iterator[Planned]:
    """Second pass: every request to send, in due order (ties keep archive order).

    ``warn`` hears, at the end, of records that came out of start order (the first
    pass, in file order, could not see that)."""
    shard, shards = config.shard
    whole, frac = int(config.amplify), config.amplify - int(config.amplify)
    seed = config.seed.to_bytes(8, "big", signed=True)
    due_at = _DueTimes(the_plan, config.speed, seed)
    heap: list[tuple[float, int, Planned]] = []
    order = 0
    selected = 0
    reader = ArchiveReader(config.paths, skip_corrupt=config.skip_corrupt)
    for record in reader:
        start = record.start_ns
        if config.start_ns is not None and start < config.start_ns:
            continue
        if config.end_ns is not None and start >= config.end_ns:
            break
        if config.limit is not None and selected >= config.limit:
            break
        selected += 1
        # Before the shard's choice: a record's place in its tick counts every shard's.
        due = due_at.earliest(start)
        if shards > 1 and shard_of(record, shards) != shard:
            continue
        tail = False
        if the_plan.tail_by is not None and the_plan.tail_threshold is not None:
            value = getattr(record, the_plan.tail_by)
            tail = value is not None and value >= the_plan.tail_threshold
        budget = _budget(record, tail, config.tail_stretch)
        key = _key(record)
        copies = whole + (1 if frac and _u64(key, seed, b"amplify") < frac * 2**64 else 0)
        for c in range(copies):
            item = Planned(due_at.due(key, c), record, c, tail, budget)
            heapq.heappush(heap, (item.due_s, order, item))
            order += 1
        # Nothing read later is due before ``due``: what is due by then can go. Spread
        # over its tick, a request waits here for the rest of its tick to be read, so
        # the heap holds at most one tick's requests (all copies).
        while heap and heap[0][0] <= due:
            yield heapq.heappop(heap)[2]
    while heap:
        yield heapq.heappop(heap)[2]
    if warn is not None and reader.reorder is not None:
        for line in reader.reorder.warnings():
            warn(f"warning: {line}")
