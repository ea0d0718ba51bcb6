"""The replay schedule: which records go out, when, and with how much work.

Two streaming passes over the archive. The first (``plan``) loads a few columns to
find the replayed set's span, the tail threshold and the longest request; the
second (``schedule``) yields one ``Planned`` request at a time in due order, so
memory does not grow with the archive. Everything here is arithmetic on recorded
data — no clock, no network — so ``--dry-run`` and the tests see exactly what a
live replay sends.
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from tailreplay.dialects import dialect_for
from tailreplay.errors import InputError
from tailreplay.replayer import settings
from tailreplay.replayer.due_times import AMPLIFY_JITTER_S, DueTimes, u64
from tailreplay.replayer.speed import Shape
from tailreplay.replayer.ticks import Ticks, detect_ticks, spread_tick, tick_floor
from tailreplay.shared_options import SKIP_CORRUPT, TAIL_QUANTILE, TAIL_STRETCH
from tailreplay.traces.archive.columns import Columns, load_columns
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record

__all__ = [
    "AMPLIFY_JITTER_S",
    "DEFAULT_TAIL_COST",
    "MAX_BUDGET",
    "MOST_INPUT_TOKENS",
    "Plan",
    "Planned",
    "ScheduleConfig",
    "TailCost",
    "first_burst",
    "plan",
    "schedule",
    "shard_of",
    "until",
]

Array = np.ndarray

MAX_BUDGET = 2**32 - 1
"""A stretched budget is a token count too (``max_tokens`` < 2^32 in the archive)."""

MOST_INPUT_TOKENS = 1 << 24
"""The longest prompt a replay makes up, in tokens (16.8M: above every context an
engine serves, ~70 MB of text). An archive's ``input_tokens`` holds up to 2^32 - 1;
a prompt that long would take the replayer's memory (and the built-in simulator's,
sized for it), so a record that asks more is sent this many (``Plan.inputs_cut``)."""


@dataclass(frozen=True)
class TailCost:
    """What a request costs a server, in ms per token: the tail's measure when an archive
    records no latencies (``service_demand = input_ms·input + output_ms·output``)."""

    input_ms: float
    output_ms: float

    def demand(self, input_tokens: int | None, output_tokens: int | None) -> float:
        """Milliseconds of work (absent counts are 0)."""
        return self.input_ms * (input_tokens or 0) + self.output_ms * (output_tokens or 0)

    def __str__(self) -> str:
        return f"input={self.input_ms:g},output={self.output_ms:g}"


DEFAULT_TAIL_COST = TailCost(input_ms=0.0125, output_ms=6.04)
"""The built-in simulator's default profile (``fast``): prefill costs 0.0125 ms a prompt
token, and each output token one decode step, 6 ms + 0.04 ms for the sequence itself
(``replay`` derives it from the profile; a test holds the two equal)."""


# Which records a replay can send again, and which it must leave out: a POST to a
# route no dialect serves, captured without its body, would go out empty and measure
# nothing the recording did.

UNBUILDABLE = "POSTs to routes no dialect serves, captured without their bodies"
"""How the records ``rebuildable`` refuses are named in messages."""


def rebuildable(method: str | None, path: str | None, has_body: bool) -> bool:
    """Whether a record can be sent again: with its body, as recorded; without one, as a
    synthetic request of its dialect, or as a call without a body (``GET /v1/models``).
    A POST to a route no dialect serves, kept without its body, cannot: sending it
    empty would measure nothing the recording did."""
    if has_body or (method or "POST").upper() != "POST":
        return True
    return path is None or dialect_for(path) is not None


def unbuildable(
    paths: Sequence[str | os.PathLike[str]], skip_corrupt: bool, per_file: Sequence[int]
) -> npt.NDArray[np.bool_] | None:
    """The records of ``paths`` (the first ``per_file`` of each) that ``rebuildable``
    refuses, as a mask; None when there are none."""
    cols = load_columns(
        paths,
        ["path", "method"],
        presence_only=["req_body"],
        skip_corrupt=skip_corrupt,
        limits=per_file,
    )
    targets, methods = cols["path"], cols["method"]
    has_path, has_method, has_body = (cols.present[n] for n in ("path", "method", "req_body"))
    posts = ~has_method | (methods == "POST")
    candidates = np.flatnonzero(posts & has_path & ~has_body)
    if candidates.size == 0:
        return None
    unknown = {p for p in set(targets[candidates]) if dialect_for(p) is None}
    if not unknown:
        return None
    refused = np.zeros(len(targets), dtype=bool)
    refused[candidates] = [p in unknown for p in targets[candidates]]
    return refused if refused.any() else None


@dataclass(frozen=True)
class ScheduleConfig:
    """What a replay sends and when; the options that set it declare its defaults
    (``replayer/settings.py``, ``tailreplay/shared_options.py``)."""

    paths: Sequence[str | os.PathLike[str]]
    speed: Shape = field(default_factory=settings.SPEED.value)
    amplify: float = settings.AMPLIFY.value()
    tail_stretch: float = TAIL_STRETCH.value()
    tail_quantile: float = TAIL_QUANTILE.value()
    start_ns: int | None = None
    end_ns: int | None = None
    limit: int | None = None
    shard: tuple[int, int] = settings.SHARD_OF.value()
    seed: int = settings.SEED.value()
    skip_corrupt: bool = SKIP_CORRUPT.value()
    tail_cost: TailCost = DEFAULT_TAIL_COST
    max_context: int | None = None
    """The target's context in tokens, when known: a stretched budget is cut so that
    input + budget fits it (never below the recorded budget)."""
    drop_retries: bool = False
    """Leave out records that are recorded retries (``attempt`` >= 2): the replay's own
    client retries, or none (``--retries policy`` or ``off``)."""
    spread_ticks: bool | None = settings.SPREAD_TICKS.value()
    """Spread each tick's requests over the tick (None: when the timestamps are quantised)."""
    tick_placement: str = settings.TICK_PLACEMENT.value()
    """How a spread tick's requests are placed in it (``ticks.PLACEMENTS``)."""
    per_file: tuple[int, ...] | None = None
    """Read no more than the first that many records of each file (``Plan.per_file`` of
    a plan made before, so processes that plan apart replay the same records)."""
    within_s: float | None = None
    """``--duration`` of an open-loop replay: the plan counts the records due before it
    (``Plan.due_within``), so the run says what it will send."""

    def __post_init__(self) -> None:
        # The command line's options refuse these already; the API's callers meet the
        # same range here.
        TAIL_STRETCH.refuse_outside(self.tail_stretch)
        TAIL_QUANTILE.refuse_outside(self.tail_quantile)


@dataclass(frozen=True)
class Plan:
    """What the first pass learned about the replayed set (all shards together)."""

    count: int
    first_start_ns: int
    span_s: float
    tail_by: str | None
    """``duration_ns``; ``service_demand`` (no durations recorded: ``TailCost`` of the
    input tokens and the output budget); or None (none of those recorded)."""
    tail_threshold: float | None
    tail_count: int
    capped: int = 0
    """Tail records whose stretched budget was cut to fit ``max_context``."""
    over_context: int = 0
    """Records that do not fit ``max_context`` even so (input + recorded budget)."""
    longest: int | None = None
    """The most tokens one request holds: input + output budget (stretch and cap
    applied), over the replayed set; None when no record has token counts."""
    inputs_cut: int = 0
    """Records whose prompt is cut to ``MOST_INPUT_TOKENS``."""
    warnings: list[str] = field(default_factory=list)
    """What reading the archives met: empty files, torn tails, skipped records and bytes."""
    ticks: Ticks | None = None
    """The tick the timestamps were logged at (``replayer/ticks.py``), if any."""
    spread_ns: int | None = None
    """The tick each tick's requests are spread over; None: sent at their recorded times."""
    per_file: tuple[int, ...] = ()
    """The records each file held when the plan first read it. Every later read stops
    there, so a file still being written (a live capture) replays as it was then."""
    refused: int = 0
    """Records left out because they cannot be rebuilt (``rebuildable``)."""
    due_within: int | None = None
    """With ``ScheduleConfig.within_s``: the records due before it (at their recorded
    times dilated; spreading ticks moves a few across it)."""

    @property
    def to_send(self) -> int:
        """The records the schedule sends: those due within ``--duration``, or all."""
        return self.count if self.due_within is None else self.due_within


@dataclass(slots=True)
class Planned:
    due_s: float
    """Offset from the replay's start at which this request is due."""
    record: Record
    copy: int
    tail: bool
    budget: int | None
    """Output tokens to ask for (None: unknown, send as recorded)."""
    phase: str | None = None
    """The load shape's phase at ``due_s`` (``Shape.phase``)."""
    key: bytes = b""
    """What this record's draws are keyed on (``_key``): with ``copy``, the seed of its
    synthetic prompt's own blocks, so no two requests share text they did not record."""

    def __lt__(self, other: Planned) -> bool:  # for the re-ordering heap
        return self.due_s < other.due_s


def _key(record: Record, index: int) -> bytes:
    """What a record's draws are keyed on: its trace id, or without one its start and
    its place in the replayed stream (every shard reads the same stream), so records
    stamped in one tick do not all draw alike."""
    if record.trace_id:
        return record.trace_id
    return record.start_ns.to_bytes(8, "big", signed=True) + index.to_bytes(8, "big")


def shard_of(record: Record, shards: int, index: int = 0) -> int:
    """The shard a record (the ``index``-th replayed) belongs to: by its trace id, so
    shards never overlap."""
    return u64(_key(record, index), b"shard") % shards


def _load(config: ScheduleConfig, name: str, per_file: Sequence[int] | None) -> Columns:
    """One field of ``config.paths``' records, no more of each file than ``per_file``."""
    return load_columns(config.paths, [name], skip_corrupt=config.skip_corrupt, limits=per_file)


def _window(cols: Columns, config: ScheduleConfig) -> tuple[np.ndarray | None, int]:
    """The replayed records as a mask (None when every record is replayed), and how
    many records in the window cannot be rebuilt (``rebuildable``): left out."""
    starts = cols["start_ns"]
    left_out = None
    if config.drop_retries:
        attempts = _load(config, "attempt", cols.per_file)
        retries = attempts.present["attempt"] & (attempts["attempt"] >= 2)
        left_out = retries if retries.any() else None
    refused = unbuildable(config.paths, config.skip_corrupt, cols.per_file)
    unwindowed = config.start_ns is None and config.end_ns is None and config.limit is None
    if unwindowed and refused is None:
        return (None if left_out is None else ~left_out), 0
    keep = np.ones(len(starts), dtype=bool) if left_out is None else ~left_out
    if config.start_ns is not None:
        keep &= starts >= config.start_ns
    if config.end_ns is not None:
        keep &= starts < config.end_ns
    count = 0
    if refused is not None:
        count = int((keep & refused).sum())
        keep &= ~refused
    if config.limit is not None:
        idx = np.flatnonzero(keep)[config.limit :]
        keep[idx] = False
    return keep, count


def plan(config: ScheduleConfig) -> Plan:
    """First pass: the replayed set's first start, span, tail and longest request."""
    # One value column at a time (at 5M records each is 40 MB), each load reduced to
    # what the plan keeps before the next: durations, then token counts.
    cols = _load(config, "duration_ns", config.per_file)
    per_file = tuple(cols.per_file)
    keep, refused = _window(cols, config)
    starts = _replayed(cols, "start_ns", keep)[0]
    if starts.size == 0:
        raise InputError(_nothing_to_replay(config, refused))
    count, first, span_s = int(starts.size), int(starts[0]), float(starts[-1] - starts[0]) / 1e9
    within = None
    if config.within_s is not None:
        reached = config.speed.recorded_offset(config.within_s, span_s)
        within = int(np.searchsorted(starts - first, reached * 1e9, side="left"))
    durations, has = _replayed(cols, "duration_ns", keep)
    tail_by, threshold, tail = None, None, None
    if has.any():
        tail_by = "duration_ns"
        threshold, tail = _tail(durations, has, config.tail_quantile)
    warnings = cols.warnings
    ticks, last_start = detect_ticks(starts), int(starts.max())
    del cols, starts, durations, has
    # Loads of the same files in the same order, as far as the first read: the records
    # line up with the first load's even while a file grows.
    inputs, base, has_base, has_tokens = _tokens(config, keep, per_file)
    if tail_by is None and has_tokens.any():
        tail_by = "service_demand"
        demand = inputs * config.tail_cost.input_ms
        demand += base * config.tail_cost.output_ms  # ``TailCost.demand``'s arithmetic
        threshold, tail = _tail(demand, has_tokens, config.tail_quantile)
        del demand
    if tail is None or config.tail_stretch == 1:
        # A stretch of 1 changes no budget: no request is the tail's, in any view.
        tail = np.zeros(count, dtype=bool)
    # The tail was chosen by what the records ask; what is sent is cut to what is made.
    inputs_cut = int((inputs > MOST_INPUT_TOKENS).sum())
    np.minimum(inputs, MOST_INPUT_TOKENS, out=inputs)
    capped, over, longest = _budgets(config, inputs, base, has_base & tail, has_tokens)
    the_plan = Plan(
        count=count,
        first_start_ns=first,
        span_s=span_s,
        tail_by=tail_by,
        tail_threshold=threshold,
        tail_count=int(tail.sum()),
        capped=capped,
        over_context=over,
        longest=longest,
        inputs_cut=inputs_cut,
        warnings=warnings,
        per_file=per_file,
        due_within=within,
        refused=refused,
    )
    return _with_ticks(the_plan, ticks, last_start, config.spread_ticks)


def _nothing_to_replay(config: ScheduleConfig, refused: int) -> str:
    given = [
        flag
        for flag, value in (
            ("--from", config.start_ns),
            ("--to", config.end_ns),
            ("--limit", config.limit),
        )
        if value is not None
    ]
    if config.drop_retries:
        given.append("--retries")
    if refused:
        given.append(f"{refused:,} {UNBUILDABLE}")
    if given:
        return f"no records to replay (none left after {', '.join(given)})"
    return "no records to replay: the archives hold none"


def _with_ticks(the_plan: Plan, ticks: Ticks | None, last_start: int, wanted: bool | None) -> Plan:
    """The plan with the clock's tick (``replayer/ticks.py``) and, when the schedule
    spreads over it, its span from the first tick's start to the last tick's end."""
    spread = spread_tick(ticks, wanted)
    if ticks is None or spread is None:
        return replace(the_plan, ticks=ticks)
    first = tick_floor(the_plan.first_start_ns, ticks)
    last = tick_floor(last_start, ticks) + spread
    return replace(
        the_plan, ticks=ticks, spread_ns=spread, first_start_ns=first, span_s=(last - first) / 1e9
    )


def _replayed(cols: Columns, name: str, keep: Array | None) -> tuple[Array, Array]:
    """(values, present) of the replayed records (views when all are replayed)."""
    if keep is None:
        return cols[name], cols.present[name]
    return cols[name][keep], cols.present[name][keep]


def _tail(values: Array, has: Array, quantile: float) -> tuple[float, Array]:
    """The threshold at ``quantile`` of the present values, and who is at or above it.

    Where values tie at the threshold (durations logged to the second, a constant
    synthetic trace), "at or above" could take in far more than the tail. The ties
    are all in or all out, whichever leaves the tail nearer its share of the present
    values (``1 - quantile``; out when both are as near): all tied, none is the tail.
    Out, the threshold is the next float up, so that every later ``>=`` agrees."""
    present = values[has]  # a copy, which the percentile may sort in place
    threshold = float(np.percentile(present, quantile * 100, overwrite_input=True))
    share = (1 - quantile) * present.size
    del present
    tail = has & (values >= threshold)
    above = has & (values > threshold)
    at_or_above, strictly = int(tail.sum()), int(above.sum())
    if strictly != at_or_above and abs(strictly - share) <= abs(at_or_above - share):
        threshold, tail = float(np.nextafter(threshold, np.inf)), above
    return threshold, tail


def _tokens(
    config: ScheduleConfig, keep: Array | None, per_file: Sequence[int]
) -> tuple[Array, Array, Array, Array]:
    """(input tokens, unstretched budget, has a budget, has either) of the replayed
    records, 0 where absent. The budget is ``_budget``'s: output tokens, else max_tokens
    (loaded only when some record lacks output tokens). One column a load: loading
    two at once costs as much again as the second column holds."""

    def load(name: str) -> tuple[Array, Array]:
        return _replayed(_load(config, name, per_file), name, keep)

    inputs, has_input = load("input_tokens")
    inputs = inputs.astype(np.uint32)  # < 2^32 (the valid values): half the memory held
    base, has_base = load("output_tokens")
    if not has_base.all():
        cap, has_cap = load("max_tokens")
        base = np.where(has_base, base, cap)
        has_base = has_base | has_cap
    return inputs, base, has_base, has_base | has_input


def _budgets(
    config: ScheduleConfig, inputs: Array, base: Array, stretch: Array, has_tokens: Array
) -> tuple[int, int, int | None]:
    """(tail budgets ``max_context`` cut, requests over it even so, the most tokens one
    request holds): ``_budget`` over the records at once, with the same arithmetic,
    touching only the ``stretch`` ones."""
    idx = np.flatnonzero(stretch)
    stretched = np.minimum(np.ceil(config.tail_stretch * base[idx]), MAX_BUDGET).astype(np.int64)
    capped = 0
    if config.max_context is not None:
        fit = np.maximum(config.max_context - inputs[idx].astype(np.int64), base[idx])
        capped = int((stretched > fit).sum())
        stretched = np.minimum(stretched, fit)
    if not has_tokens.any():
        return capped, 0, None
    need = base + inputs  # int64; 0 where absent
    need[idx] = inputs[idx] + stretched
    over = 0 if config.max_context is None else int((need > config.max_context).sum())
    return capped, over, int(need.max(where=has_tokens, initial=0))


def _budget(record: Record, tail: bool, config: ScheduleConfig) -> int | None:
    base = record.output_tokens if record.output_tokens is not None else record.max_tokens
    if base is None:
        return None
    if not tail:
        return base
    budget = min(math.ceil(config.tail_stretch * base), MAX_BUDGET)
    if config.max_context is not None:
        # Fit the context, but never ask less than was recorded.
        prompt = min(record.input_tokens or 0, MOST_INPUT_TOKENS)
        budget = min(budget, max(config.max_context - prompt, base))
    return budget


def _tail_value(record: Record, tail_by: str, cost: TailCost) -> float | None:
    """The record's measure for the tail (``Plan.tail_by``), or None when it has none."""
    if tail_by == "duration_ns":
        return record.duration_ns
    base = record.output_tokens if record.output_tokens is not None else record.max_tokens
    if base is None and record.input_tokens is None:
        return None
    return cost.demand(record.input_tokens, base)  # the float arithmetic of ``plan``


def schedule(
    config: ScheduleConfig, the_plan: Plan, warn: Callable[[str], None] | None = None
) -> Iterator[Planned]:
    """Second pass: every request to send, in due order (ties keep archive order).

    ``warn`` hears, at the end, of records that came out of start order (the first
    pass, in file order, could not see that)."""
    shard, shards = config.shard
    whole, frac = int(config.amplify), config.amplify - int(config.amplify)
    seed = config.seed.to_bytes(8, "big", signed=True)
    spread = the_plan.ticks if the_plan.spread_ns is not None else None
    due_at = DueTimes(
        the_plan.first_start_ns,
        the_plan.span_s,
        spread,
        config.speed,
        seed,
        whole + bool(frac),
        placement=config.tick_placement,
    )
    heap: list[tuple[float, int, Planned]] = []
    order = 0
    selected = 0
    reader = ArchiveReader(
        config.paths, skip_corrupt=config.skip_corrupt, limits=the_plan.per_file or None
    )
    for record in reader:
        take = _take(record, config, selected, the_plan.count)
        if take is None:
            break
        if not take:
            continue
        selected += 1
        # Before the shard's choice: a record's place in its tick counts every shard's.
        due = due_at.earliest(record.start_ns)
        if shards > 1 and shard_of(record, shards, selected) != shard:
            continue
        tail = _in_tail(record, the_plan, config)
        budget = _budget(record, tail, config)
        key = _key(record, selected)
        copies = whole + (1 if frac and u64(key, seed, b"amplify") < frac * 2**64 else 0)
        for c in range(copies):
            due_s = due_at.due(key, c)
            item = Planned(due_s, record, c, tail, budget, config.speed.phase(due_s), key)
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


def _take(record: Record, config: ScheduleConfig, selected: int, planned: int) -> bool | None:
    """Whether the schedule's pass selects ``record``; None when nothing after it can be."""
    start = record.start_ns
    if config.start_ns is not None and start < config.start_ns:
        return False
    if config.end_ns is not None and start >= config.end_ns:
        # A record out of start order, inside --to, may still come until the plan's
        # count is reached.
        return None if selected >= planned else False
    if config.drop_retries and (record.attempt or 1) > 1:
        return False
    if not rebuildable(record.method, record.path, record.req_body is not None):
        return False
    if config.limit is not None and selected >= config.limit:
        return None
    return True


def _in_tail(record: Record, the_plan: Plan, config: ScheduleConfig) -> bool:
    """Whether ``record`` is at or above the plan's tail threshold."""
    if the_plan.tail_by is None or the_plan.tail_threshold is None or config.tail_stretch == 1:
        return False
    value = _tail_value(record, the_plan.tail_by, config.tail_cost)
    return value is not None and value >= the_plan.tail_threshold


FIRST_BURST_S = 0.05
"""Requests due within this of the first are the first burst (``first_burst``)."""


def first_burst(
    items: Iterator[Planned], most: int, within_s: float = FIRST_BURST_S
) -> tuple[Iterator[Planned], int]:
    """``items`` as they were, and how many of the first ``most`` fall due within
    ``within_s`` of the first (at least 1): the connections a replay opens before its
    start. Not more: a server that gives each connection a thread of a small pool
    (llama.cpp's server: 6 threads with 4 slots) holds an idle one until its keep-alive
    ends, so 32 opened for a schedule that starts with one request left that request
    5 s waiting for a thread."""
    head = list(itertools.islice(items, most))
    burst = sum(1 for item in head if item.due_s - head[0].due_s < within_s) if head else 1
    return itertools.chain(head, items), burst


def until(items: Iterator[Planned], limit_s: float | None, cut: list[Planned]) -> Iterator[Planned]:
    """``items`` due before ``limit_s`` of replay time; ``cut`` gets the first one not sent."""
    for item in items:
        if limit_s is not None and item.due_s >= limit_s:
            cut.append(item)
            return
        yield item
