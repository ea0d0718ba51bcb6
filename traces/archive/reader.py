"""ArchiveReader: stream records from one or many archive files.

Each file is scanned by ``traces/archive/scan.py`` (limits, the record check of
``traces/archive/validate.py``, torn tails, damage and ``skip_corrupt``); files that hold
records in completion order are re-ordered by ``traces/archive/reorder.py`` within a
window whose memory is bounded by a byte budget. An empty file (a disk that filled
up before the header was written) holds no records: it is skipped with a warning.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tailreplay.errors import InputError, TailreplayError
from tailreplay.traces.archive.record import Record
from tailreplay.traces.archive.reorder import DEFAULT_REORDER_WINDOW_NS, Reorder, window_ns
from tailreplay.traces.archive.scan import FileReport, FileScan, check_readable, open_chunks

__all__ = [
    "DEFAULT_REORDER_WINDOW_NS",
    "SHADOWS",
    "ArchiveReader",
    "FileReport",
    "check_readable",
    "count_readable",
    "open_chunks",
    "read_header",
]


def _scan_header(path: Path, report: FileReport, skip_corrupt: bool) -> None:
    check_readable(path)
    FileScan(path, report, skip_corrupt).read_header()


def read_header(path: str | os.PathLike[str], *, skip_corrupt: bool = False) -> dict[str, Any]:
    """The header of one archive (raises the same errors as reading it); ``{}`` for an
    empty file. With ``skip_corrupt``, damaged header fields are left out."""
    p = Path(path)
    report = FileReport(p)
    _scan_header(p, report, skip_corrupt)
    return report.header


SHADOWS = ("skip", "only", "keep")
"""What a reader does with ``proxy --shadow``'s copies (``ArchiveReader``)."""


class ArchiveReader:
    """Records from one or many archive files.

    Iterating yields ``Record`` objects in ``start_ns`` order across all files (a
    streaming k-way merge; each file is re-ordered within a bounded window, since
    capture files hold records in completion order). ``order="file"`` yields them as
    stored, file by file. ``iter_maps()`` yields the raw maps (faster; keeps unknown
    keys, which ``merge`` and ``slice`` pass through unchanged). Every file's header
    is read and checked on construction, so a bad file fails before any work.

    >>> reader = ArchiveReader(["a.msgpack", "b.msgpack"])
    >>> for record in reader: ...
    >>> reader.warnings()  # empty files, torn tails, skipped records and bytes

    ``limits`` (one per file) reads no more than the first that many records of each
    file, in file order: a file still being written is read as it was when counted.

    ``shadows``: what to make of the copies ``proxy --shadow`` sent to its shadow
    target (records with ``shadow_of``): ``"skip"`` them (the default: every figure
    of a capture is production's), read ``"only"`` them, or ``"keep"`` everything
    (``merge``, ``slice``: an archive copied whole).
    """

    def __init__(
        self,
        paths: Iterable[str | os.PathLike[str]],
        *,
        skip_corrupt: bool = False,
        order: str = "time",
        limits: Sequence[int] | None = None,
        shadows: str = "skip",
    ) -> None:
        self.paths = [Path(p) for p in paths]
        if shadows not in SHADOWS:
            raise ValueError(f"shadows must be one of {SHADOWS}, not {shadows!r}")
        self.shadows = shadows
        if not self.paths:
            raise InputError("no archive files given")
        if limits is not None and len(limits) != len(self.paths):
            raise ValueError(f"{len(limits)} limits for {len(self.paths)} files")
        self.limits: Sequence[int | None] = [None] * len(self.paths) if limits is None else limits
        if order not in ("time", "file"):
            raise ValueError(f"order must be 'time' or 'file', not {order!r}")
        self.order = order
        self.skip_corrupt = skip_corrupt
        self.reports = [FileReport(p) for p in self.paths]
        self.reorder = Reorder() if order == "time" else None
        for path, report in zip(self.paths, self.reports, strict=True):
            _scan_header(path, report, skip_corrupt)

    @property
    def headers(self) -> list[dict[str, Any]]:
        """One per file (``{}`` for an empty file)."""
        return [r.header for r in self.reports]

    @property
    def late(self) -> int:
        """Records that arrived later than the re-ordering window allowed (yielded anyway)."""
        return self.reorder.late if self.reorder is not None else 0

    def __iter__(self) -> Iterator[Record]:
        from_map = Record.from_map
        for m in self.iter_maps():
            yield from_map(m)

    def iter_maps(self) -> Iterator[dict[str, Any]]:
        maps = self._maps()
        if self.shadows == "keep":
            return maps
        return _shadows(maps, only=self.shadows == "only")

    def _maps(self) -> Iterator[dict[str, Any]]:
        scans = [
            FileScan(p, r, self.skip_corrupt, n)
            for p, r, n in zip(self.paths, self.reports, self.limits, strict=True)
        ]
        if self.reorder is None:
            for s in scans:
                yield from s.records()
            return
        reorder = self.reorder
        ordered = [reorder.in_time_order(s, window_ns(s.report.header)) for s in scans]
        if len(ordered) == 1:
            yield from ordered[0]
        else:
            yield from heapq.merge(*ordered, key=_start)

    def warnings(self) -> list[str]:
        """One human line per problem met so far (after iterating)."""
        lines = [line for r in self.reports for line in r.warnings()]
        if self.reorder is not None:
            lines += self.reorder.warnings()
        return lines

    @property
    def skipped_bytes(self) -> int:
        return sum(r.skipped_bytes for r in self.reports)


def _shadows(maps: Iterator[dict[str, Any]], *, only: bool) -> Iterator[dict[str, Any]]:
    """The shadow copies (``only``) or every other record."""
    for m in maps:
        if (m.get("shadow_of") is not None) is only:
            yield m


def _start(m: dict[str, Any]) -> int:
    start: int = m["start_ns"]
    return start


def count_readable(path: Path) -> int:
    """How many records a reader gets from ``path`` as it is (up to its first damage),
    shadow copies included."""
    count = 0
    try:
        for _ in ArchiveReader([path], order="file", shadows="keep").iter_maps():
            count += 1
    except TailreplayError:
        pass  # what came before the damage is what a reader gets
    return count
