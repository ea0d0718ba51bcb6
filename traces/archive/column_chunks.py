"""Archives read as chunks of columns, for figures over every record in flat memory.

``read_parts`` gives each file a part (the caller's accumulator) and feeds it the
file's records a ``ColumnChunk`` at a time, in file order: ints and bools as they
are, str values as codes into one ``Strings`` table, fixed-size bin values as bytes,
arrays of ints as their items. A clean file goes through the C scanner
(``traces/archive/column_scan.py``), which builds no Python object a record; any
other (damage, a torn tail, an invalid or unusual record, records an upgrade
changes) through the careful reader (``traces/archive/scan.py``), whose checked maps
become the same columns, and which owns every verdict, warning and error. When the
scanner gives up on a file part-way, that file's part is dropped and a fresh one is
fed the careful reader's records: a part is always one whole account of its file.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from tailreplay.traces.archive import format as fmt
from tailreplay.traces.archive.column_scan import Scanned, scan_file
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.scan import FileScan
from tailreplay.traces.archive.validate import (
    BIN,
    BOOL,
    FIELD_SPECS,
    INT,
    INTS,
    STR,
    TARGET,
    TOKEN,
)

__all__ = ["ChunkFields", "ColumnChunk", "Part", "Strings", "read_parts"]

Array = npt.NDArray[Any]
Mask = npt.NDArray[np.bool_]

_TEXT = frozenset({STR, TOKEN, TARGET})
_SCAN_RECORDS = 1 << 14
"""Records a chunk of the C scanner holds at most (its buffers stay a few MiB)."""
_SCAN_ITEMS = 1 << 20
_PY_RECORDS = 4096
_PY_BYTES = 32 << 20
"""Records and bytes (``FileScan.cost``) a chunk of the careful reader holds at most."""


@dataclass(frozen=True)
class ChunkFields:
    """The fields a read copies (``valued``: the first is ``start_ns``) and those it only
    notes the presence of. A valued field is an int or bool, a str, a bin of a fixed
    size, or an array of ints; each int fits int64."""

    valued: tuple[str, ...]
    presence: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.valued[:1] != ("start_ns",):
            raise ValueError("the first valued field is start_ns")
        for name in self.valued:
            kind, _, hi = FIELD_SPECS[name]
            if kind == BIN and not hi:
                raise ValueError(f"{name!r} is a bin of no fixed size")
            if kind in (INT, INTS) and hi > 1 << 63:
                raise ValueError(f"{name!r} holds ints past int64")
            if kind not in (INT, BOOL, BIN, INTS) and kind not in _TEXT:
                raise ValueError(f"{name!r} cannot be read as a column")


@dataclass
class Strings:
    """The str values of a read, each numbered once, in the order first met."""

    codes: dict[bytes, int] = field(default_factory=dict)
    """Each value's UTF-8 bytes and its number (the C scanner adds to it as it reads)."""
    _texts: list[str] = field(default_factory=list)

    def code(self, text: str) -> int:
        """The number of ``text``; -1 when no record held it."""
        return self.codes.get(text.encode(), -1)

    def add(self, text: str) -> int:
        return self.codes.setdefault(text.encode(), len(self.codes))

    def text(self, code: int) -> str:
        """The value numbered ``code``."""
        if code >= len(self._texts):  # numbered in order: decode the ones added since
            new = itertools.islice(self.codes, len(self._texts), None)
            self._texts += [raw.decode() for raw in new]  # checked UTF-8
        return self._texts[code]


@dataclass
class ColumnChunk:
    """Records of one file as columns, valid while the part's ``add`` runs.

    ``values[f]`` is int64 (0 where absent): an int, a bool (1: true), a str's code in
    the read's ``Strings``, an array's length; ``present[f]`` says which records have
    ``f``. ``bins[f]`` holds a bin field's bytes, (records, size), zeros where absent;
    ``items[f]`` an array field's items, record after record.
    """

    n: int
    values: dict[str, Array]
    present: dict[str, Mask]
    bins: dict[str, Array]
    items: dict[str, Array]
    record: Callable[[int], dict[str, Any]]
    """The whole map of record ``i``, for a field read rarely (a failed request's message)."""
    expected: int = 0
    """About how many records the whole file holds, from its size (0: not known)."""


class Part(Protocol):
    def add(self, chunk: ColumnChunk) -> None: ...


P = TypeVar("P", bound=Part)


def read_parts(
    reader: ArchiveReader, fields: ChunkFields, new_part: Callable[[], P], strings: Strings
) -> list[P]:
    """One part per file of ``reader`` (in file order, shadow copies included), each fed
    its file's chunks."""
    if any(limit is not None for limit in reader.limits):
        raise ValueError("read_parts reads whole files: no limits")
    parts = []
    for path, report in zip(reader.paths, reader.reports, strict=True):
        version = report.header.get("version")
        if type(version) is int and not fmt.records_change(version):
            part = new_part()
            if _scanned_into(part, path, fields, strings):
                parts.append(part)
                continue
        part = new_part()
        for chunk in _careful_chunks(FileScan(path, report, reader.skip_corrupt), fields, strings):
            part.add(chunk)
        parts.append(part)
    return parts


def _scanned_into(part: Part, path: Path, fields: ChunkFields, strings: Strings) -> bool:
    """Feed ``part`` the C scanner's chunks of ``path``; False when it gave up on the file."""
    names = (*fields.valued, *fields.presence)
    size = path.stat().st_size  # a compressed file's: an estimate short of its records

    def take(scanned: Scanned) -> None:
        part.add(_scanned_chunk(scanned, names, fields, size))

    return scan_file(
        path,
        names,
        len(fields.valued),
        take,
        strings=strings.codes,
        max_records=_SCAN_RECORDS,
        max_items=_SCAN_ITEMS,
    )


def _scanned_chunk(
    scanned: Scanned, names: tuple[str, ...], fields: ChunkFields, size: int
) -> ColumnChunk:
    values, present, bins, items = {}, {}, {}, {}
    n = scanned.count
    expected = size * n // max(scanned.end - int(scanned.starts[0]), 1) if n else 0
    for j, name in enumerate(names):
        present[name] = scanned.present[:, j].view(np.bool_)
        if j >= len(fields.valued):
            continue
        kind, _, width = FIELD_SPECS[name]
        if kind == BIN:
            bins[name] = np.frombuffer(scanned.extras[j], dtype=np.uint8).reshape(n, width)
            continue
        values[name] = scanned.values[:, j]
        if kind == INTS:
            items[name] = np.frombuffer(scanned.extras[j], dtype=np.int64)
    return ColumnChunk(n, values, present, bins, items, scanned.record, expected)


def _careful_chunks(scan: FileScan, fields: ChunkFields, strings: Strings) -> Iterator[ColumnChunk]:
    """The careful reader's records of one file as chunks."""
    maps: list[dict[str, Any]] = []
    held = 0
    for m in scan.records():
        maps.append(m)
        held += scan.cost
        if len(maps) >= _PY_RECORDS or held >= _PY_BYTES:
            yield _chunk_of(maps, fields, strings)
            maps, held = [], 0
    if maps:
        yield _chunk_of(maps, fields, strings)


def _chunk_of(maps: list[dict[str, Any]], fields: ChunkFields, strings: Strings) -> ColumnChunk:
    """Checked record maps as the columns the C scanner gives of the same records."""
    n = len(maps)
    values, present, bins, items = {}, {}, {}, {}
    # Per field, one pass at C speed (map) where a comprehension would run Python a record.
    for name in (*fields.valued, *fields.presence):
        got = list(map(dict.get, maps, itertools.repeat(name, n)))  # nil is absent
        absent = got.count(None)
        anywhere = absent < n
        present[name] = (
            np.fromiter(map(operator.is_not, got, itertools.repeat(None)), dtype=np.bool_, count=n)
            if anywhere
            else np.zeros(n, dtype=np.bool_)
        )
        if name in fields.presence:
            continue
        kind, _, width = FIELD_SPECS[name]
        if kind == BIN:
            zeros = bytes(width)
            joined = (
                b"".join(zeros if v is None else v for v in got) if anywhere else bytes(n * width)
            )
            bins[name] = np.frombuffer(joined, dtype=np.uint8).reshape(n, width)
            continue
        if not anywhere:
            values[name] = np.zeros(n, dtype=np.int64)
            if kind == INTS:
                items[name] = np.zeros(0, dtype=np.int64)
            continue
        if kind in _TEXT:
            got = [None if v is None else strings.add(v) for v in got]
        elif kind == INTS:
            flat = itertools.chain.from_iterable(v for v in got if v is not None)
            items[name] = np.fromiter(flat, dtype=np.int64)
            got = [None if v is None else len(v) for v in got]
        values[name] = (
            np.array(got, dtype=np.int64)  # a bool as 1 or 0
            if not absent
            else np.fromiter((0 if v is None else v for v in got), dtype=np.int64, count=n)
        )
    return ColumnChunk(n, values, present, bins, items, maps.__getitem__)
