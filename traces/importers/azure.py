"""Azure LLM inference trace 2023 (Splitwise): TIMESTAMP, ContextTokens, GeneratedTokens.

TIMESTAMP is naive wall-clock time with 7 fractional digits; we read it as UTC and
keep every digit. Lines end in CRLF and the last has no newline.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from tailreplay.traces.archive.record import Record
from tailreplay.traces.importers.rows import ImportReport, chat_record

__all__ = ["parse_timestamp", "read"]


def parse_timestamp(text: str) -> int:
    """``2023-11-16 18:15:46.6844585`` → unix ns (UTC), all 7 digits kept."""
    whole, _, frac = text.strip().partition(".")
    seconds = int(datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp())
    if frac and not frac.isdigit():
        raise ValueError(f"bad fraction {frac!r}")
    return seconds * 10**9 + int((frac or "0").ljust(9, "0")[:9])


def read(path: Path, report: ImportReport) -> Iterator[Record]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = csv.reader(f)
        header = next(rows, None)
        if header is None or [h.strip() for h in header[:3]] != [
            "TIMESTAMP",
            "ContextTokens",
            "GeneratedTokens",
        ]:
            report.bad(1, "not an Azure LLM trace header (TIMESTAMP,ContextTokens,GeneratedTokens)")
            return
        for line, row in enumerate(rows, start=2):
            try:
                start = parse_timestamp(row[0])
                tokens_in, tokens_out = int(row[1]), int(row[2])
                if tokens_in < 0 or tokens_out < 0:
                    raise ValueError("negative token count")
            except (ValueError, IndexError, OverflowError) as exc:
                report.bad(line, f"malformed row: {exc}")
                continue
            yield chat_record(
                path.name, line, start, input_tokens=tokens_in, output_tokens=tokens_out
            )
