"""Columnar loading: selected record fields as numpy arrays, for statistics.

``load_columns`` reads archives in file order (no re-ordering window needed) and
sorts the result by ``start_ns`` once, with numpy, at the end. Clean files whose
requested fields are integers, booleans or strings go through the small C scanner in
``_colscan.c`` (several times faster; a string comes back as its index in a table of
the file's distinct values), which checks every record against the same
table as the Python reader (``traces/archive/validate.py``); any file it cannot take whole —
damage, a torn tail, an invalid or unusual record — is read by the careful
pure-Python reader instead, which owns every verdict, warning and error.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tailreplay.errors import ArchiveError
from tailreplay.traces.archive import format as fmt
from tailreplay.traces.archive.column_scan import Scanned, scan_file
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import BOOL_FIELDS, FIELDS, INT_FIELDS
from tailreplay.traces.archive.scan import FileScan, changed_while_read
from tailreplay.traces.archive.validate import FIELD_SPECS, STR, TARGET, TOKEN

try:
    from tailreplay.traces.archive import _colscan  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: the pure-Python path does the job
    _colscan = None

__all__ = ["Columns", "load_columns"]

_CHUNK_RECORDS = 1 << 20
_SHADOW = "shadow_of"
_TEXT = frozenset(name for name, spec in FIELD_SPECS.items() if spec[0] in (STR, TOKEN, TARGET))
"""String fields: the C scanner copies them as indices into the file's distinct values."""

Array = npt.NDArray[Any]
Mask = npt.NDArray[np.bool_]


@dataclass
class Columns:
    """Equal-length arrays, one per field, sorted by ``start_ns``.

    Integer fields are int64 and boolean fields bool, with 0/False where a record
    lacks the field; other fields are object arrays with None. ``present[f]`` says
    which records have field ``f``; fields loaded as ``presence_only`` have no values.
    """

    n: int
    values: dict[str, Array]
    present: dict[str, Mask]
    warnings: list[str] = field(default_factory=list)
    per_file: list[int] = field(default_factory=list)
    """Records loaded from each file, in the order given: as ``limits`` to a later load,
    the same records again even if a file has grown since."""
    shadow_copies: int = 0
    """Copies sent to ``proxy --shadow``, left out of every column."""
    unchecked: list[str] = field(default_factory=list)
    """One line per file that carries no checksums (an older format version)."""

    def __getitem__(self, name: str) -> Array:
        return self.values[name]

    def where(self, name: str) -> Array:
        """The values of ``name`` for the records that have it."""
        return self.values[name][self.present[name]]


def load_columns(
    paths: Iterable[str | os.PathLike[str]],
    fields: Sequence[str],
    *,
    presence_only: Sequence[str] = (),
    skip_corrupt: bool = False,
    limits: Sequence[int] | None = None,
) -> Columns:
    """Load ``fields`` (plus ``start_ns``) from every record of ``paths``.

    ``presence_only`` fields yield only a ``present`` mask (e.g. ``error``: stats
    needs to know which records failed, not why), which keeps the fast path open.

    >>> cols = load_columns(["peak.msgpack"], ["duration_ns", "status"])
    >>> np.percentile(cols.where("duration_ns"), 99)

    ``limits`` (one per file, e.g. an earlier load's ``per_file``) keeps only the first
    that many records of each file, in file order.

    Shadow copies (``proxy --shadow``: records with ``shadow_of``) are left out, as
    ``ArchiveReader`` leaves them out by default: columns are production's.
    """
    unknown = [f for f in (*fields, *presence_only) if f not in FIELDS]
    if unknown:
        raise ValueError(f"unknown record fields: {', '.join(unknown)}")
    presence_only = [*presence_only, _SHADOW]
    wanted = dict.fromkeys(["start_ns", *fields, *presence_only])
    valued = [f for f in wanted if f not in presence_only or f == "start_ns"]
    names = valued + [f for f in wanted if f not in valued]  # valued first, for _colscan
    reader = ArchiveReader(paths, skip_corrupt=skip_corrupt, order="file", limits=limits)

    scannable = all(f in INT_FIELDS or f in BOOL_FIELDS or f in _TEXT for f in valued)
    parts: list[tuple[dict[str, Array], dict[str, Mask]]] = []
    for path, report, limit in zip(reader.paths, reader.reports, reader.limits, strict=True):
        fast = None
        version = report.header.get("version")
        as_stored = type(version) is int and not fmt.records_change(version)
        if _colscan is not None and scannable and as_stored:
            fast = _scan_file(path, names, len(valued))
        if fast is None:  # the careful reader: every verdict, error and warning is its own
            scan = FileScan(path, report, skip_corrupt, limit)
            fast = _load_python(scan.records(), names, set(valued))
        elif limit is not None:  # the C scanner read the whole file
            fast = _first(fast, limit, path)
        parts.append(fast)

    if len(parts) == 1:
        values, present = parts[0]
    else:
        values = _join({f: [p[0][f] for p in parts] for f in valued})
        present = _join({f: [p[1][f] for p in parts] for f in names}, np.bool_)
    per_file = [len(p[1]["start_ns"]) for p in parts]
    parts.clear()
    copies = int(present[_SHADOW].sum())
    values, present = _without_shadows(values, present, keep_field=_SHADOW in fields)
    starts = values["start_ns"]
    n = len(starts)
    if n > 1 and not bool(np.all(starts[1:] >= starts[:-1])):  # skip the sort when sorted
        order = np.argsort(starts, kind="stable")
        values = {f: a[order] for f, a in values.items()}
        present = {f: a[order] for f, a in present.items()}
    unchecked = [f"{r.path}: {r.integrity}" for r in reader.reports if r.header and not r.checked]
    return Columns(n, values, present, reader.warnings(), per_file, copies, unchecked)


def _without_shadows(
    values: dict[str, Array], present: dict[str, Mask], *, keep_field: bool
) -> tuple[dict[str, Array], dict[str, Mask]]:
    """The columns without the rows of shadow copies (and without their presence mask,
    unless it was asked for)."""
    shadow = present[_SHADOW]
    if shadow.any():
        keep = ~shadow
        values = {f: a[keep] for f, a in values.items()}
        present = {f: a[keep] for f, a in present.items()}
    if not keep_field:
        present = {f: a for f, a in present.items() if f != _SHADOW}
    return values, present


def _first(
    part: tuple[dict[str, Array], dict[str, Mask]], limit: int, path: Path
) -> tuple[dict[str, Array], dict[str, Mask]]:
    """The first ``limit`` records of one file's columns (copies, so the rest is let
    go), as ``FileScan`` with a limit gives them: fewer means the file changed."""
    values, present = part
    n = len(present["start_ns"])
    if n < limit:
        raise changed_while_read(path, limit, n)
    if n == limit:
        return part
    return (
        {f: a[:limit].copy() for f, a in values.items()},
        {f: a[:limit].copy() for f, a in present.items()},
    )


def _load_python(
    maps: Iterator[dict[str, Any]], names: list[str], valued: set[str]
) -> tuple[dict[str, Array], dict[str, Mask]]:
    raw: dict[str, list[Any]] = {f: [] for f in names}
    appenders = [(f, raw[f].append) for f in names]
    # Millions of short-lived dicts trigger the cyclic GC over and over; none of them
    # can form a cycle, so pause it while loading (about 1.5x faster).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for m in maps:
            get = m.get
            for f, append in appenders:
                append(get(f))
    finally:
        if was_enabled:
            gc.enable()
    values: dict[str, Array] = {}
    present: dict[str, Mask] = {}
    for f in names:
        items = raw.pop(f)
        present[f] = np.fromiter((v is not None for v in items), dtype=bool, count=len(items))
        if f in valued:
            values[f] = _to_array(f, items, present[f])
    return values, present


def _to_array(name: str, items: list[Any], mask: Mask) -> Array:
    if name in INT_FIELDS or name in BOOL_FIELDS:
        dtype = np.int64 if name in INT_FIELDS else np.bool_
        if not mask.all():
            items = [0 if v is None else v for v in items]
        try:
            arr: Array = np.array(items, dtype=dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ArchiveError(f"field {name!r} holds a value of the wrong type ({exc})") from exc
        return arr
    objects: Array = np.empty(len(items), dtype=object)
    objects[:] = items
    return objects


def _scan_file(
    path: Path, names: list[str], nvalued: int
) -> tuple[dict[str, Array], dict[str, Mask]] | None:
    """Columns of one clean file via the C scanner, or None to use the Python path."""
    strings: dict[bytes, int] | None = {} if _TEXT.intersection(names[:nvalued]) else None
    chunks: dict[str, list[Array]] = {f: [] for f in names[:nvalued]}
    masks: dict[str, list[Mask]] = {f: [] for f in names}

    def take(part: Scanned) -> None:
        # Columns per call of at most _CHUNK_RECORDS, so the raw buffers stay small.
        for j, name in enumerate(names):
            masks[name].append(part.present[:, j].astype(bool))
            if j < nvalued:
                col = part.values[:, j].copy()
                chunks[name].append(col.astype(bool) if name in BOOL_FIELDS else col)

    if not scan_file(
        path, tuple(names), nvalued, take, strings=strings, max_records=_CHUNK_RECORDS
    ):
        return None
    values, present = _join(chunks), _join(masks, np.bool_)
    for name in names[:nvalued]:
        if name in BOOL_FIELDS and values[name].dtype != np.bool_:
            values[name] = values[name].astype(bool)
        elif name in _TEXT and strings is not None:
            values[name] = _decoded(values[name], present[name], strings)
    return values, present


def _decoded(codes: Array, mask: Mask, strings: dict[bytes, int]) -> Array:
    """The object array (None where absent) of str values scanned as indices."""
    table: Array = np.empty(len(strings), dtype=object)
    for raw, code in strings.items():
        table[code] = raw.decode()  # checked as UTF-8 by the scanner
    out: Array = np.full(len(codes), None, dtype=object)
    out[mask] = table[codes[mask]]
    return out


def _join(parts: dict[str, list[Array]], empty: type = np.int64) -> dict[str, Array]:
    """Concatenate field by field, freeing each field's pieces before the next."""
    out: dict[str, Array] = {}
    for name in list(parts):
        pieces = parts.pop(name)
        if not pieces:
            out[name] = np.empty(0, dtype=empty)
        else:
            out[name] = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        del pieces
    return out
