"""One side of a report: the per-request columns of a recorded or a replayed archive.

Read in one pass over the records' maps. Scalars go into numpy arrays; the
inter-token gaps, which run to hundreds per request, go straight into a
``LogHistogram`` so memory stays flat however long the capture.
"""

from __future__ import annotations

import gc
import os
from array import array
from collections.abc import Callable, Iterable, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.openai_api import generates_nothing
from tailreplay.report.idle_calls import IdleCalls
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.replay_header import ReplayHeader, is_replay
from tailreplay.traces.results.log_histogram import LogHistogram
from tailreplay.traces.results.metrics import Requests, is_error

__all__ = ["Side", "load_side"]

Array = npt.NDArray[Any]
_GAP_FLUSH = 1 << 20
_INTS = (
    "start_ns",
    "duration_ns",
    "ttfb_ns",
    "ttft_content_ns",
    "ttst_ns",
    "input_tokens",
    "output_tokens",
    "lag_ns",
    "shard",
)
LABELS = ("phase", "model", "path", "session")
"""String fields kept as codes (an int per request, -1 when absent) into a label list."""
_ALWAYS = ("phase", "path")
"""The ``LABELS`` every side reads: the phase table's and the route table's."""
_FLAGS = ("stream", "error", "tail", "estimated", "retry", "cancelled")


@dataclass
class Side:
    """Equal-length arrays (one entry per request, in file order) plus the gap histogram.

    Times are ns; a missing integer is -1; ``key`` is the request's identity: the
    (trace id, span id) of the recorded exchange, for a replay the original's.
    """

    paths: list[str]
    headers: list[dict[str, Any]]
    start_ns: Array
    duration_ns: Array
    ttfb_ns: Array
    ttft_content_ns: Array
    ttst_ns: Array
    """Arrival to the second token event (TTFT plus the first gap); -1 where none."""
    input_tokens: Array
    output_tokens: Array
    stream: Array
    error: Array
    """True for a failed exchange (error set, status 0, or status >= 400)."""
    lag_ns: Array
    shard: Array
    """The shard of a sharded replay (``--shard i/N``, ``--workers N``) that sent it (-1: none)."""
    phase: Array
    """Index into ``labels["phase"]`` of the load shape's phase a request was due in (-1: none)."""
    model: Array
    path: Array
    """Index into ``labels["path"]``: the path without its query string (read always:
    the report's route table)."""
    session: Array
    tail: Array
    estimated: Array
    """Token counts estimated here, not reported by the server (tokens_source)."""
    retry: Array
    """A retry (``attempt`` >= 2): recognised by the proxy, or sent by ``--retries policy``."""
    cancelled: Array
    """Cancelled by the replayer in flight (Ctrl-C, ``--slo-stop``): a failed exchange
    (``error`` is set too), which ``capacity`` counts at its time in flight."""
    key: list[bytes | None]
    itl_us: LogHistogram
    warnings: list[str] = field(default_factory=list)
    error_kinds: dict[str, int] = field(default_factory=dict)
    """Failed requests by kind (``error``, else ``http_<status>``)."""
    error_messages: dict[str, str] = field(default_factory=dict)
    """The first ``error_message`` (the target's own words) of each kind that has one."""
    labels: dict[str, list[str]] = field(default_factory=dict)
    """Per ``LABELS`` field, its values in the order the records first name them."""
    idle: IdleCalls = field(default_factory=IdleCalls)
    """Calls that generate nothing, kept out of every array (``idle_calls.py``);
    empty when classed by path (``--slo-by path`` judges them with the rest)."""

    @property
    def n(self) -> int:
        return int(self.start_ns.size)

    @property
    def ok(self) -> Array:
        return ~self.error

    @property
    def requests(self) -> Requests:
        """The columns the shared metric definitions read (tailreplay.traces.results.metrics)."""
        return Requests(
            duration_ns=self.duration_ns,
            ttfb_ns=self.ttfb_ns,
            ttft_content_ns=self.ttft_content_ns,
            lag_ns=self.lag_ns,
            output_tokens=self.output_tokens,
            stream=self.stream,
            error=self.error,
            ttst_ns=self.ttst_ns,
        )

    @property
    def is_replay(self) -> bool:
        """A replay's results: a header says so, or a record carries a dispatch lag (only
        a replay sends on a schedule; shards merged or sliced by ``traces`` keep it)."""
        return any(is_replay(h) for h in self.headers) or bool((self.lag_ns >= 0).any())

    @property
    def replays(self) -> list[ReplayHeader]:
        """The replay settings of every file's header (defaults where a file has none)."""
        return [ReplayHeader.read(h) for h in self.headers]


def load_side(
    paths: Iterable[str | os.PathLike[str]],
    *,
    skip_corrupt: bool = False,
    keep: Set[bytes] | None = None,
    classes: Sequence[str] = (),
    shadows: str = "skip",
) -> Side:
    """Read the records of ``paths`` into a ``Side``: all, or those whose key is in ``keep``;
    ``shadows``: production's records of a shadowed capture, or ``"only"`` the copies
    (``ArchiveReader``).

    ``classes`` names the ``LABELS`` fields to read besides the phase and the path
    (``--slo-by``, the deltas' model); the others are left absent (-1), since each costs
    the read loop a dictionary look-up a record. ``"path"`` among them also keeps the
    calls that generate nothing with the rest (``--slo-by path`` judges them)."""
    reader = ArchiveReader(paths, skip_corrupt=skip_corrupt, order="file", shadows=shadows)
    columns = _Columns()
    for name in classes:
        if name not in LABELS:
            raise ValueError(f"{name!r} is not one of {LABELS}")
        columns.coded.setdefault(name, _Coded())
    idle = None if "path" in classes else IdleCalls()
    _read(reader, keep, columns, idle)
    coded, labels = columns.labelled()
    return Side(
        paths=[str(p) for p in reader.paths],
        headers=reader.headers,
        key=columns.keys,
        itl_us=columns.itl,
        warnings=reader.warnings(),
        error_kinds=columns.error_kinds,
        error_messages=columns.error_messages,
        labels=labels,
        idle=idle or IdleCalls(),
        **columns.arrays(),
        **coded,
    )


@dataclass
class _Columns:
    """A side's columns while its records are read: typed arrays, cheap to append to."""

    ints: dict[str, array[int]] = field(default_factory=lambda: {k: array("q") for k in _INTS})
    flags: dict[str, array[int]] = field(default_factory=lambda: {k: array("b") for k in _FLAGS})
    keys: list[bytes | None] = field(default_factory=list)
    itl: LogHistogram = field(default_factory=LogHistogram)
    error_kinds: dict[str, int] = field(default_factory=dict)
    error_messages: dict[str, str] = field(default_factory=dict)
    coded: dict[str, _Coded] = field(default_factory=lambda: {k: _Coded() for k in _ALWAYS})
    """Each ``LABELS`` field read (``_ALWAYS``, and those asked for), coded as it is read."""

    def failed(self, m: dict[str, Any]) -> None:
        """Count a failed record's kind; keep the first message of each kind."""
        kind = m.get("error") or f"http_{m.get('status', 0)}"
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1
        message = m.get("error_message")
        if message and kind not in self.error_messages:
            self.error_messages[kind] = message

    def arrays(self) -> dict[str, Array]:
        """Every column of ``_INTS`` (int64) and ``_FLAGS`` (bool) as a numpy array."""
        ints = {
            name: np.frombuffer(col, dtype=np.int64) if col else np.zeros(0, np.int64)
            for name, col in self.ints.items()
        }
        flags = {
            name: np.frombuffer(col, dtype=np.int8).astype(bool) if col else np.zeros(0, bool)
            for name, col in self.flags.items()
        }
        return {**ints, **flags}

    def labelled(self) -> tuple[dict[str, Array], dict[str, list[str]]]:
        """Each ``LABELS`` field coded (int64, -1: absent), and its labels."""
        coded: dict[str, Array] = {}
        labels: dict[str, list[str]] = {}
        for name in LABELS:
            column = self.coded.get(name)
            if column is None:  # not read: every request absent
                n = len(self.keys)
                coded[name], labels[name] = np.full(n, -1, dtype=np.int64), []
            else:
                coded[name], labels[name] = column.done(strip_query=name == "path")
        return coded, labels


@dataclass
class _Coded:
    """One ``LABELS`` field while records are read: per record the index of its value
    among the distinct strings in first-seen order (-1: absent or not a string). Coded
    as each record comes, so memory grows with the distinct values, not the records
    (a record's string is a fresh object: keeping it would cost ~70 bytes a record)."""

    first: dict[str, int] = field(default_factory=dict)
    codes: array[int] = field(default_factory=lambda: array("q"))

    def done(self, *, strip_query: bool) -> tuple[Array, list[str]]:
        """The codes as int64 and their labels; paths are classed without their query
        string, each distinct path stripped once."""
        codes = np.frombuffer(self.codes, dtype=np.int64) if self.codes else np.zeros(0, np.int64)
        if not strip_query:
            return codes, list(self.first)
        bare: dict[str, int] = {}
        remap = [bare.setdefault(v.split("?", 1)[0], len(bare)) for v in self.first]
        # Code -1 picks the appended -1.
        return np.array([*remap, -1], dtype=np.int64)[codes], list(bare)


def _key(get: Callable[[str], Any]) -> bytes | None:
    """A record's identity: its original's (trace id, span id) in a replay or a shadow
    copy (``shadow_of``: the production span it copied), else its own."""
    trace, span = get("orig_trace_id"), get("orig_span_id")
    if trace is None:
        trace, span = get("trace_id"), get("shadow_of") or get("span_id")
    return trace + span if type(trace) is bytes and type(span) is bytes else None


def _idle(get: Callable[[str], Any], idle: IdleCalls, key: bytes | None) -> bool:
    """Whether the record generates nothing; if so, counted in ``idle``."""
    method, path = get("method"), get("path")
    if not generates_nothing(method, path):
        return False
    idle.add(method, path, is_error(get("status"), get("error")), get("duration_ns"), key)
    return True


def _read(
    reader: ArchiveReader, keep: Set[bytes] | None, columns: _Columns, idle: IdleCalls | None
) -> None:
    """Append the records of ``reader`` (those whose key is in ``keep``) to ``columns``;
    with ``idle``, the calls that generate nothing to it instead."""
    ints, flags, keys, itl = columns.ints, columns.flags, columns.keys, columns.itl
    gaps = array("q")
    # Unrolled, with the collector paused (none of these maps can form a cycle): this
    # loop is most of a report's time, ~2 µs a record.
    starts, durations, ttfbs = (ints[k].append for k in ("start_ns", "duration_ns", "ttfb_ns"))
    contents, seconds = ints["ttft_content_ns"].append, ints["ttst_ns"].append
    inputs, outputs, lags = (ints[k].append for k in ("input_tokens", "output_tokens", "lag_ns"))
    shards = ints["shard"].append
    # ``_ALWAYS`` (the phase and route tables); the others when a caller asks for them.
    labelled = [(c.codes.append, c.first, name) for name, c in columns.coded.items()]
    stream, failed, tail = (flags[k].append for k in ("stream", "error", "tail"))
    estimated, retry = flags["estimated"].append, flags["retry"].append
    cancelled = flags["cancelled"].append
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for m in reader.iter_maps():
            if None in m.values():  # nil means absent (docs/archive-format.md)
                m = {k: v for k, v in m.items() if v is not None}
            get = m.get
            key = _key(get)
            if (keep is not None and key not in keep) or (
                idle is not None and _idle(get, idle, key)
            ):
                continue
            keys.append(key)
            starts(get("start_ns", -1))
            durations(get("duration_ns", -1))
            ttfb = get("ttfb_ns", -1)
            ttfbs(ttfb)
            contents(get("ttft_content_ns", -1))
            inputs(get("input_tokens", -1))
            outputs(get("output_tokens", -1))
            lags(get("lag_ns", -1))
            shards(get("shard", -1))
            for append, first, name in labelled:
                value = get(name)
                append(first.setdefault(value, len(first)) if type(value) is str else -1)
            bad = is_error(get("status"), get("error"))
            failed(bad)
            if bad:
                columns.failed(m)
            stream(get("stream") is True)
            tail(get("tail") is True)
            estimated(get("tokens_source") == "estimate")
            retry((get("attempt") or 0) > 1)
            cancelled(bad and get("error") == "cancelled")
            chunk_gaps = get("chunk_gaps_us")
            seconds(ttfb + chunk_gaps[0] * 1000 if chunk_gaps and ttfb >= 0 else -1)
            if chunk_gaps and not bad:
                gaps.extend(chunk_gaps)
                if more := get("chunk_gaps_more"):
                    itl.add_bins(more)
                if len(gaps) >= _GAP_FLUSH:
                    itl.add(np.frombuffer(gaps, dtype=np.int64))
                    gaps = array("q")
    finally:
        if was_enabled:
            gc.enable()
    if gaps:
        itl.add(np.frombuffer(gaps, dtype=np.int64))
