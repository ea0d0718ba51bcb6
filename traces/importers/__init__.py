"""Importers of public trace formats into archives (docs/importers.md).

Each format module has ``read(path, report) -> Iterator[Record]``: it streams the
file, and calls ``report.bad(line, reason)`` for a malformed row instead of
raising, so one bad row never loses the rest. ``import_file`` writes the records.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailreplay.errors import InputError
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.reader import check_readable
from tailreplay.traces.archive.record import Record
from tailreplay.traces.archive.validate import record_problem
from tailreplay.traces.archive.writer import write_archive

__all__ = ["FORMATS", "ImportReport", "chat_record", "import_file", "stable_id"]


@dataclass
class ImportReport:
    path: str
    strict: bool = False
    malformed: list[tuple[int, str]] = field(default_factory=list)

    invalid: list[tuple[int, str]] = field(default_factory=list)
    """Records that parsed but hold a value no reader accepts: (record number, why)."""

    def bad(self, line: int, reason: str) -> None:
        self.malformed.append((line, reason))
        if self.strict:
            raise InputError(f"{self.path}:{line}: {reason}")

    def reject(self, n: int, reason: str) -> None:
        self.invalid.append((n, reason))
        if self.strict:
            raise InputError(f"{self.path}: record {n}: {reason}")


def stable_id(source: str, n: int, size: int = 16) -> bytes:
    """A deterministic id for row ``n`` of a source: the same file imports the same ids."""
    return hashlib.blake2b(f"{source}:{n}".encode(), digest_size=size).digest()


def chat_record(source: str, n: int, start_ns: int, **fields: Any) -> Record:
    """A streamed chat-completions request from row ``n`` of a token-count trace."""
    return Record(
        start_ns=start_ns,
        trace_id=stable_id(source, n),
        span_id=stable_id(source, n, 8),
        method="POST",
        path="/v1/chat/completions",
        stream=True,
        tokens_source="usage",
        **fields,
    )


Reader = Callable[[Path, ImportReport], Iterator[Record]]


def _formats() -> dict[str, Reader]:
    from tailreplay.traces.importers import azure, burstgpt, har, mooncake, otlp_json

    return {
        "azure": azure.read,
        "mooncake": mooncake.read,
        "burstgpt": burstgpt.read,
        "har": har.read,
        "otlp-json": otlp_json.read,
    }


FORMATS = ("azure", "mooncake", "burstgpt", "har", "otlp-json")


def _check_input(path: Path) -> None:
    check_readable(path)
    if path.stat().st_size == 0:
        raise InputError(f"{path}: empty file")
    with open(path, "rb") as f:
        head = f.read(4096)
    if b"\0" in head:
        raise InputError(f"{path}: a binary file, not a text trace")


def _valid(records: Iterator[Record], report: ImportReport) -> Iterator[Record]:
    """The records every reader will accept (traces/archive/validate.py); the rest are rejected."""
    for n, record in enumerate(records, start=1):
        problem = record_problem(record.to_map())
        if problem is None:
            yield record
        else:
            report.reject(n, problem)


def import_file(
    fmt: str, src: str | os.PathLike[str], out: str | os.PathLike[str], *, strict: bool = False
) -> tuple[int, ImportReport]:
    """Import ``src`` in format ``fmt`` into the archive ``out``; (records, report)."""
    readers = _formats()
    if fmt not in readers:
        raise InputError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    path = Path(src)
    _check_input(path)
    report = ImportReport(str(path), strict)
    header = make_header(f"import:{fmt}", extra={"input": path.name})
    try:
        records = _valid(readers[fmt](path, report), report)  # checked, the bad reported
        written = write_archive(out, header, records, checked=True)
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not text ({exc.reason})") from None
    if written == 0:
        raise InputError(
            f"{path}: no {fmt} records found"
            + (f" ({why[0][1]})" if (why := report.malformed or report.invalid) else "")
        )
    return written, report
