"""One side's records, a chunk of columns at a time, into the columns of a ``Side``.

``traces/archive/column_chunks.py`` hands each file's records on as column chunks;
a ``FilePart`` reduces each chunk with whole-array operations: the requests kept
(shadow copies, ``keep``, the calls that generate nothing), their columns, the
inter-token gaps (into a ``LogHistogram``, so memory stays flat however long the
streams), and the failures by kind. ``report/side.py`` joins the parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.openai_api import generates_nothing
from tailreplay.report.column_memory import GrowingColumn
from tailreplay.report.idle_calls import IdleCalls
from tailreplay.report.request_keys import KEY, KEY_SIZE, KeyIndex
from tailreplay.traces.archive.column_chunks import ChunkFields, ColumnChunk, Strings
from tailreplay.traces.results.figures import error_mask
from tailreplay.traces.results.log_histogram import LogHistogram

__all__ = ["FLAGS", "INTS", "FilePart", "SideRead", "side_fields"]

Array = npt.NDArray[Any]
Mask = npt.NDArray[np.bool_]

INTS = (
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
"""A side's int64 columns (-1 where absent); all but ``ttst_ns`` are record fields."""
FLAGS = ("stream", "error", "tail", "estimated", "retry", "cancelled")
_INT64_MAX = np.iinfo(np.int64).max
_KEY_BINS = ("trace_id", "span_id", "orig_trace_id", "orig_span_id", "shadow_of")
_READ = (
    *(name for name in INTS if name != "ttst_ns"),
    "status",
    "attempt",
    "stream",
    "tail",
    "method",
    "error",
    "tokens_source",
)


def side_fields(labelled: Sequence[str]) -> ChunkFields:
    """What a side reads of each record: the fields of its columns, the ``labelled``
    string fields, the keys' ids, the gaps; of the error message only where it is."""
    valued = (*_READ, *labelled, *_KEY_BINS, "chunk_gaps_us", "chunk_gaps_more")
    return ChunkFields(valued=valued, presence=("error_message",))


@dataclass(frozen=True)
class SideRead:
    """What every file of a side's read keeps."""

    strings: Strings
    labelled: tuple[str, ...]
    """The string fields read as codes (the phase and path, and those asked for)."""
    keep: KeyIndex | None
    """Only the requests with these keys (None: all)."""
    shadows: str
    """``ArchiveReader``'s: "skip" the shadow copies, read "only" them, or "keep" all."""
    idle: bool
    """Count the calls that generate nothing apart (``IdleCalls``)."""


def _shadows(copy: Mask, shadows: str) -> Mask:
    """The records a read of ``shadows`` keeps (a new mask), by which are shadow copies."""
    if shadows == "keep":
        return np.ones(copy.size, dtype=np.bool_)
    kept: Mask = copy.copy() if shadows == "only" else ~copy
    return kept


def _or_absent(chunk: ColumnChunk, name: str) -> Array:
    """The field's values, -1 where a record has none."""
    out: Array = np.where(chunk.present[name], chunk.values[name], -1)
    return out


def _keys(chunk: ColumnChunk) -> tuple[Array, Mask]:
    """Each record's identity and whether it has one: its original's (trace id, span
    id) in a replay or a shadow copy (``shadow_of``: the production span it copied),
    else its own."""
    bins, present = chunk.bins, chunk.present
    orig = present["orig_trace_id"]
    span = np.where(present["shadow_of"][:, None], bins["shadow_of"], bins["span_id"])
    whole = np.empty((chunk.n, KEY_SIZE), dtype=np.uint8)
    whole[:, :16] = np.where(orig[:, None], bins["orig_trace_id"], bins["trace_id"])
    whole[:, 16:] = np.where(orig[:, None], bins["orig_span_id"], span)
    own = present["trace_id"] & (present["shadow_of"] | present["span_id"])
    keyed: Mask = np.where(orig, present["orig_span_id"], own)
    whole[~keyed] = 0
    return whole.view(KEY).reshape(chunk.n), keyed


@dataclass
class FilePart:
    """The kept requests of one file, reduced chunk by chunk."""

    read: SideRead
    columns: dict[str, GrowingColumn] = field(default_factory=dict)
    itl: LogHistogram = field(default_factory=LogHistogram)
    idle: IdleCalls = field(default_factory=IdleCalls)
    error_kinds: dict[str, int] = field(default_factory=dict)
    error_messages: dict[str, str] = field(default_factory=dict)

    def add(self, chunk: ColumnChunk) -> None:
        read, present = self.read, chunk.present
        key, keyed = _keys(chunk)
        sel = _shadows(present["shadow_of"], read.shadows)
        if read.keep is not None:
            sel &= read.keep.contains(key, keyed)
        bad = error_mask(_or_absent(chunk, "status"), present["error"])
        if read.idle:
            sel &= ~self._idle_calls(chunk, sel, bad, key, keyed)
        self._gaps(chunk, sel & ~bad)
        self._failed(chunk, sel & bad)
        rows = np.flatnonzero(sel)
        columns = {name: _or_absent(chunk, name) for name in INTS if name != "ttst_ns"}
        columns["ttst_ns"] = _ttst(chunk, columns["ttfb_ns"])
        columns |= _flags(chunk, read.strings, bad)
        for name in read.labelled:
            columns[name] = _or_absent(chunk, name)
        columns["key"], columns["keyed"] = key, keyed
        for name, values in columns.items():
            column = self.columns.setdefault(name, GrowingColumn(values.dtype))
            column.append(values, rows, chunk.expected)

    def _gaps(self, chunk: ColumnChunk, ok: Mask) -> None:
        """The inter-token gaps of the successful requests into the histogram."""
        lengths = chunk.values["chunk_gaps_us"]
        counted = ok & (lengths > 0)
        if not counted.any():
            return
        self.itl.add(chunk.items["chunk_gaps_us"][np.repeat(counted, lengths)])
        # A long stream's gaps past its exact ones, binned as recorded: few records
        # have them, and each holds thousands of gaps.
        more, more_lengths = chunk.items["chunk_gaps_more"], chunk.values["chunk_gaps_more"]
        firsts = np.cumsum(more_lengths) - more_lengths
        for i in np.flatnonzero(counted & (more_lengths > 0)):
            self.itl.add_bins(more[firsts[i] : firsts[i] + more_lengths[i]].tolist())

    def _idle_calls(
        self, chunk: ColumnChunk, sel: Mask, bad: Mask, key: Array, keyed: Mask
    ) -> Mask:
        """Which selected records generate nothing (each distinct method and path asked
        once); those are counted in ``idle``."""
        idle = np.zeros(chunk.n, dtype=np.bool_)
        rows = np.flatnonzero(sel & chunk.present["method"])
        if not rows.size:
            return idle
        strings = self.read.strings
        path = _or_absent(chunk, "path")[rows]
        pairs = chunk.values["method"][rows] * (len(strings.codes) + 1) + (path + 1)
        _, first, which = np.unique(pairs, return_index=True, return_inverse=True)
        durations = _or_absent(chunk, "duration_ns")
        for k, at in enumerate(first):
            method = strings.text(int(chunk.values["method"][rows[at]]))
            text = strings.text(int(path[at])) if path[at] >= 0 else None
            if generates_nothing(method, text):
                calls = rows[which == k]
                idle[calls] = True
                self.idle.add(method, text, bad[calls], durations[calls])
        self.idle.key_parts.append(key[idle & keyed])
        return idle

    def _failed(self, chunk: ColumnChunk, failed: Mask) -> None:
        """Count the failed requests by kind (``error``, else ``http_<status>``); keep
        the first message of each kind."""
        rows = np.flatnonzero(failed)
        if not rows.size:
            return
        strings, values, present = self.read.strings, chunk.values, chunk.present
        named = present["error"][rows] & (values["error"][rows] != strings.code(""))
        status = np.where(present["status"], values["status"], 0)[rows]
        ids = np.where(named, values["error"][rows], -1 - status)
        distinct, first, which = np.unique(ids, return_index=True, return_inverse=True)
        # Kinds by name, in the order first met: an ``error`` may read like a status's.
        kinds: dict[str, int] = {}
        kind_of_id = np.empty(distinct.size, dtype=np.int64)
        for k in np.argsort(first):
            code = int(distinct[k])
            name = strings.text(code) if code >= 0 else f"http_{-1 - code}"
            kind_of_id[k] = kinds.setdefault(name, len(kinds))
        kind_of = kind_of_id[which]
        counts = np.bincount(kind_of, minlength=len(kinds))
        with_message = present["error_message"][rows]
        for name, k in kinds.items():
            self.error_kinds[name] = self.error_kinds.get(name, 0) + int(counts[k])
            if name not in self.error_messages:
                self._message(chunk, name, rows[with_message & (kind_of == k)])

    def _message(self, chunk: ColumnChunk, kind: str, rows: Array) -> None:
        """The first non-empty message among ``rows`` (records of ``kind``)."""
        for i in rows:
            message = chunk.record(int(i)).get("error_message")
            if message:
                self.error_messages[kind] = message
                return


def _ttst(chunk: ColumnChunk, ttfb: Array) -> Array:
    """Arrival to the second token event (TTFT plus the first gap), -1 where none."""
    lengths = chunk.values["chunk_gaps_us"]
    has = lengths > 0
    first = np.zeros(chunk.n, dtype=np.int64)
    first[has] = chunk.items["chunk_gaps_us"][(np.cumsum(lengths) - lengths)[has]]
    # A gap near the field's bound (2^62 µs) is past int64 in ns: such a time saturates.
    fits = first <= (_INT64_MAX - np.maximum(ttfb, 0)) // 1000
    ttst: Array = np.where(fits, ttfb + np.where(fits, first, 0) * 1000, _INT64_MAX)
    return np.where(has & (ttfb >= 0), ttst, -1)


def _flags(chunk: ColumnChunk, strings: Strings, bad: Mask) -> dict[str, Mask]:
    values, present = chunk.values, chunk.present

    def equals(name: str, text: str) -> Mask:
        same: Mask = present[name] & (values[name] == strings.code(text))
        return same

    return {
        "stream": present["stream"] & (values["stream"] == 1),
        "error": bad,
        "tail": present["tail"] & (values["tail"] == 1),
        "estimated": equals("tokens_source", "estimate"),
        "retry": present["attempt"] & (values["attempt"] > 1),
        "cancelled": bad & equals("error", "cancelled"),
    }
