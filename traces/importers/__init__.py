"""Importers of public trace formats into archives (docs/importers.md).

Each format module has ``read(path, report) -> Iterator[(place, Record)]``: it
streams the file (``text_input.py``: bounded lines, CSV rows, whole documents), and
calls ``report.bad(place, reason)`` for a malformed row instead of raising, so one
bad row never loses the rest (``rows.py``: the report, and the ids and records the
formats make of rows). A row's place is its line number, or in a format read whole
its name (``entry 3``). ``import_file`` writes the records.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from tailreplay.errors import InputError
from tailreplay.traces.archive.batch_writer import write_archive
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.reader import check_readable
from tailreplay.traces.archive.record import Record
from tailreplay.traces.archive.validate import record_problem
from tailreplay.traces.importers import azure, burstgpt, har, mooncake, otlp_json
from tailreplay.traces.importers.rows import ImportReport, Place

__all__ = ["FORMATS", "ImportReport", "import_file"]


Reader = Callable[[Path, ImportReport], Iterator[tuple[Place, Record]]]

_READERS: dict[str, Reader] = {
    "azure": azure.read,
    "mooncake": mooncake.read,
    "burstgpt": burstgpt.read,
    "har": har.read,
    "otlp-json": otlp_json.read,
}

FORMATS = tuple(_READERS)


def _check_input(path: Path) -> None:
    check_readable(path)
    if path.stat().st_size == 0:
        raise InputError(f"{path}: empty file")
    with open(path, "rb") as f:
        head = f.read(4096)
    if b"\0" in head:
        raise InputError(f"{path}: a binary file, not a text trace")


def _valid(rows: Iterator[tuple[Place, Record]], report: ImportReport) -> Iterator[Record]:
    """The records every reader will accept (traces/archive/validate.py); the rest are rejected."""
    for place, record in rows:
        problem = record_problem(record.to_map())
        if problem is None:
            yield record
        else:
            report.reject(place, problem)


def import_file(
    fmt: str, src: str | os.PathLike[str], out: str | os.PathLike[str], *, strict: bool = False
) -> tuple[int, ImportReport]:
    """Import ``src`` in format ``fmt`` into the archive ``out``; (records, report)."""
    if fmt not in _READERS:
        raise InputError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    path = Path(src)
    _check_input(path)
    report = ImportReport(str(path), strict)
    header = make_header(f"import:{fmt}", extra={"input": path.name})
    records = _valid(_READERS[fmt](path, report), report)  # checked, the bad reported

    def some(written: int) -> None:
        if written == 0:
            why = report.malformed or report.invalid
            raise InputError(f"{path}: no {fmt} records found" + (f" ({why[0][1]})" if why else ""))

    return write_archive(out, header, records, checked=True, accept=some), report
