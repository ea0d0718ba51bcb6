"""Text from a file nobody vouches for, bounded: numbered lines, CSV rows, and whole
JSON documents.

A line that is not UTF-8, or longer than ``MAX_LINE_BYTES``, is reported as a
malformed row and read as an empty line, so the lines after it keep their numbers
and the import goes on. A byte order mark before the first line is dropped. A
document read whole (HAR, a single OTLP/JSON document) is refused past
``MAX_DOCUMENT_BYTES``: ``json`` builds every object at once, several times the
text's size.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from tailreplay.errors import InputError
from tailreplay.traces.importers.rows import ImportReport

__all__ = ["MAX_DOCUMENT_BYTES", "MAX_LINE_BYTES", "csv_rows", "json_document", "lines"]

MAX_LINE_BYTES = 16 << 20
MAX_DOCUMENT_BYTES = 256 << 20
_BOM = "\ufeff"
_CHUNK = 1 << 20


def _rest_of_line(f: BinaryIO) -> None:
    """Read past the end of an over-long line, a chunk at a time."""
    while True:
        part = f.readline(_CHUNK)
        if not part or part.endswith(b"\n"):
            return


def lines(f: BinaryIO, report: ImportReport) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for each line of ``f``, its newline kept; a line that
    cannot be read is reported and given as ``"\\n"``."""
    n = 0
    while raw := f.readline(MAX_LINE_BYTES + 1):
        n += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            _rest_of_line(f)
            report.bad(n, f"a line longer than {MAX_LINE_BYTES >> 20} MiB")
            yield n, "\n"
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            report.bad(n, f"not UTF-8 text at byte {exc.start + 1} of the line")
            yield n, "\n"
            continue
        yield n, text.removeprefix(_BOM) if n == 1 else text


def csv_rows(f: BinaryIO, report: ImportReport) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` for each CSV row of ``f``; blank rows are left out and
    rows the csv module refuses (a field over its size limit) are reported. The line
    number is the row's last line (a quoted field may span lines)."""
    rows = csv.reader(text for _, text in lines(f, report))
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except csv.Error as exc:
            report.bad(rows.line_num, f"malformed row: {exc}")
            continue
        if any(field.strip() for field in row):
            yield rows.line_num, row


def json_document(path: Path, what: str) -> Any:
    """The one JSON document in ``path`` (``what`` names its format in errors)."""
    size = path.stat().st_size
    if size > MAX_DOCUMENT_BYTES:
        raise InputError(
            f"{path}: {size:,} bytes; a {what} file is read whole, up to "
            f"{MAX_DOCUMENT_BYTES >> 20} MiB"
        )
    with open(path, "rb") as f:
        raw = f.read(MAX_DOCUMENT_BYTES + 1)
    try:
        return json.loads(raw.decode("utf-8").removeprefix(_BOM))
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (at byte {exc.start + 1})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not a {what} file: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{path}: not a {what} file: {exc}") from None
