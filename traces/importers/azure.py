"""Azure LLM inference trace 2023 (Splitwise): TIMESTAMP, ContextTokens, GeneratedTokens.

TIMESTAMP is naive wall-clock time with 7 fractional digits; we read it as UTC and
keep every digit. Lines end in CRLF and the last has no newline.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from tailreplay.traces.archive.record import Record
from tailreplay.traces.importers.rows import ImportReport, Place, chat_record
from tailreplay.traces.importers.text_input import csv_rows

__all__ = ["parse_timestamp", "read"]

_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]


def parse_timestamp(text: str) -> int:
    """``2023-11-16 18:15:46.6844585`` → unix ns (UTC), all 7 digits kept."""
    whole, _, frac = text.strip().partition(".")
    seconds = int(datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp())
    if frac and not (frac.isascii() and frac.isdigit()):
        raise ValueError(f"bad fraction {frac[:20]!r}")
    return seconds * 10**9 + int((frac or "0").ljust(9, "0")[:9])


def read(path: Path, report: ImportReport) -> Iterator[tuple[Place, Record]]:
    with open(path, "rb") as f:
        rows = csv_rows(f, report)
        first = next(rows, None)
        if first is None or [h.strip() for h in first[1][:3]] != _HEADER:
            report.bad(
                first[0] if first else 1, f"not an Azure LLM trace header ({','.join(_HEADER)})"
            )
            return
        for line, row in rows:
            try:
                start = parse_timestamp(row[0])
                tokens_in, tokens_out = int(row[1]), int(row[2])
                if tokens_in < 0 or tokens_out < 0:
                    raise ValueError("negative token count")
            except (ValueError, IndexError, OverflowError) as exc:
                report.bad(line, f"malformed row: {exc}")
                continue
            yield (
                line,
                chat_record(
                    path.name, line, start, input_tokens=tokens_in, output_tokens=tokens_out
                ),
            )
