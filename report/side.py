"""One side of a report: the per-request columns of a recorded or a replayed archive.

Read a chunk of columns at a time (``report/side_columns.py``): scalars go into numpy
arrays; the inter-token gaps, which run to hundreds per request, go straight into a
``LogHistogram`` so memory stays flat however long the capture.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.report.column_memory import joined
from tailreplay.report.idle_calls import IdleCalls
from tailreplay.report.request_keys import KEY, KeyIndex
from tailreplay.report.side_columns import FLAGS, INTS, FilePart, SideRead, side_fields
from tailreplay.traces.archive.column_chunks import Strings, read_parts
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.replay_header import ReplayHeader, is_replay
from tailreplay.traces.results.figures import Requests
from tailreplay.traces.results.log_histogram import LogHistogram

__all__ = ["Side", "load_side"]

Array = npt.NDArray[Any]
Mask = npt.NDArray[np.bool_]
LABELS = ("phase", "model", "path", "session")
"""String fields kept as codes (an int per request, -1 when absent) into a label list."""
_ALWAYS = ("phase", "path")
"""The ``LABELS`` every side reads: the phase table's and the route table's."""


@dataclass
class Side:
    """Equal-length arrays (one entry per request, in file order) plus the gap histogram.

    Times are ns; a missing integer is -1; ``key`` is the request's identity: the
    (trace id, span id) of the recorded exchange, for a replay the original's, for a
    shadow copy the production span's.
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
    key: Array
    """``request_keys.KEY`` items: the original's (trace id, span id), zeros where
    ``keyed`` is false (a record without the ids)."""
    keyed: Mask
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
        """The columns the shared metric definitions read (tailreplay.traces.results.figures)."""
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

    def key_of(self, i: int) -> bytes | None:
        """Request ``i``'s key as bytes (None: it has none)."""
        return self.key[i].tobytes() if self.keyed[i] else None

    def keys(self) -> list[bytes]:
        """The keys of the requests that have one, in order, as bytes."""
        keys: list[bytes] = self.key[self.keyed].tolist()
        return keys

    def key_index(self) -> KeyIndex:
        """Where each of the side's keys last occurs."""
        return KeyIndex(self.key, self.keyed)


def load_side(
    paths: Iterable[str | os.PathLike[str]],
    *,
    skip_corrupt: bool = False,
    keep: KeyIndex | None = None,
    classes: Sequence[str] = (),
    shadows: str = "skip",
) -> Side:
    """Read the records of ``paths`` into a ``Side``: all, or those whose key is in ``keep``;
    ``shadows``: production's records of a shadowed capture, or ``"only"`` the copies
    (``ArchiveReader``).

    ``classes`` names the ``LABELS`` fields to read besides the phase and the path
    (``--slo-by``, the deltas' model); the others are left absent (-1), since each costs
    the read a string look-up a record. ``"path"`` among them also keeps the calls that
    generate nothing with the rest (``--slo-by path`` judges them)."""
    reader = ArchiveReader(paths, skip_corrupt=skip_corrupt, order="file", shadows=shadows)
    for name in classes:
        if name not in LABELS:
            raise ValueError(f"{name!r} is not one of {LABELS}")
    labelled = tuple(name for name in LABELS if name in _ALWAYS or name in classes)
    read = SideRead(Strings(), labelled, keep, shadows, idle="path" not in classes)
    was_enabled = gc.isenabled()
    gc.disable()  # the careful reader's maps cannot form cycles: no collector passes
    try:
        parts = read_parts(reader, side_fields(labelled), lambda: FilePart(read), read.strings)
    finally:
        if was_enabled:
            gc.enable()
    return _joined(parts, read, reader)


def _joined(parts: list[FilePart], read: SideRead, reader: ArchiveReader) -> Side:
    """The side the files' parts make, in file order."""
    columns = _columns(parts, read.labelled)
    coded: dict[str, Array] = {}
    labels: dict[str, list[str]] = {}
    n = columns["start_ns"].size
    for name in LABELS:
        if name in read.labelled:
            coded[name], labels[name] = _labelled(
                columns.pop(name), read.strings, strip_query=name == "path"
            )
        else:  # not read: every request absent (-1 seen n times: a read-only view, no memory)
            coded[name], labels[name] = np.broadcast_to(np.int64(-1), (n,)), []
    itl, idle = LogHistogram(), IdleCalls()
    error_kinds: dict[str, int] = {}
    error_messages: dict[str, str] = {}
    for part in parts:
        itl.merge(part.itl)
        idle.merge(part.idle)
        for kind, count in part.error_kinds.items():
            error_kinds[kind] = error_kinds.get(kind, 0) + count
        for kind, message in part.error_messages.items():
            error_messages.setdefault(kind, message)
    return Side(
        paths=[str(p) for p in reader.paths],
        headers=reader.headers,
        itl_us=itl,
        warnings=reader.warnings(),
        error_kinds=error_kinds,
        error_messages=error_messages,
        labels=labels,
        idle=idle,
        **columns,
        **coded,
    )


def _columns(parts: list[FilePart], labelled: Sequence[str]) -> dict[str, Array]:
    """Each column of the parts joined, the parts' let go before the next is joined."""
    empty = {name: np.zeros(0, dtype=np.int64) for name in (*INTS, *labelled)}
    empty |= {name: np.zeros(0, dtype=np.bool_) for name in (*FLAGS, "keyed")}
    empty["key"] = np.zeros(0, dtype=KEY)
    out: dict[str, Array] = {}
    for name, none in empty.items():
        columns = [part.columns.pop(name) for part in parts if name in part.columns]
        out[name] = joined(columns, none.dtype) if columns else none
    return out


def _labelled(raw: Array, strings: Strings, *, strip_query: bool) -> tuple[Array, list[str]]:
    """A string field's codes (-1: absent) renumbered by the order the side's requests
    first name each value, and those values; paths are classed without their query
    string, each distinct path stripped once."""
    named = raw >= 0
    distinct, first, which = np.unique(raw[named], return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty(distinct.size, dtype=np.int64)
    rank[order] = np.arange(distinct.size)
    codes = np.full(raw.size, -1, dtype=np.int64)
    codes[named] = rank[which.reshape(-1)]
    values = [strings.text(int(code)) for code in distinct[order]]
    if not strip_query:
        return codes, values
    bare: dict[str, int] = {}
    remap = [bare.setdefault(v.split("?", 1)[0], len(bare)) for v in values]
    # Code -1 picks the appended -1.
    return np.array([*remap, -1], dtype=np.int64)[codes], list(bare)
