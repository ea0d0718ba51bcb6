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
from dataclasses import dataclass, field

import numpy as np

from tailreplay.errors import InputError
from tailreplay.replayer.speed import Speed
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
    return Plan(
        count=int(starts.size),
        first_start_ns=int(starts[0]),
        span_s=float(starts[-1] - starts[0]) / 1e9,
        tail_by=tail_by,
        tail_threshold=threshold,
        tail_count=tail_count,
        warnings=cols.warnings,
    )


def _budget(record: Record, tail: bool, factor: float) -> int | None:
    base = record.output_tokens if record.output_tokens is not None else record.max_tokens
    if base is None:
        return None
    return math.ceil(factor * base) if tail else base


def schedule(
    config: ScheduleConfig, the_plan: Plan, warn: Callable[[str], None] | None = None
) -> Iterator[Planned]:
    """Second pass: every request to send, in due order (ties keep archive order).

    ``warn`` hears, at the end, of records that came out of start order (the first
    pass, in file order, could not see that)."""
    shard, shards = config.shard
    first = the_plan.first_start_ns
    speed = config.speed
    whole, frac = int(config.amplify), config.amplify - int(config.amplify)
    seed = config.seed.to_bytes(8, "big", signed=True)
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
        if shards > 1 and shard_of(record, shards) != shard:
            continue
        due = speed.replay_offset((start - first) / 1e9, the_plan.span_s)
        tail = False
        if the_plan.tail_by is not None and the_plan.tail_threshold is not None:
            value = getattr(record, the_plan.tail_by)
            tail = value is not None and value >= the_plan.tail_threshold
        budget = _budget(record, tail, config.tail_stretch)
        key = _key(record)
        copies = whole + (1 if frac and _u64(key, seed, b"amplify") < frac * 2**64 else 0)
        for c in range(copies):
            jitter = 0.0 if c == 0 else AMPLIFY_JITTER_S * _u64(key, seed, bytes([c % 256])) / 2**64
            item = Planned(due + jitter, record, c, tail, budget)
            heapq.heappush(heap, (item.due_s, order, item))
            order += 1
        while heap and heap[0][0] <= due:
            yield heapq.heappop(heap)[2]
    while heap:
        yield heapq.heappop(heap)[2]
    if warn is not None and reader.reorder is not None:
        for line in reader.reorder.warnings():
            warn(f"warning: {line}")
