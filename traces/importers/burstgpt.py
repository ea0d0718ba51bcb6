"""BurstGPT: Timestamp (s from the trace start), Model, Request tokens, Response tokens,
Total tokens, Log Type. A row with 0 response tokens is a failed request."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from tailreplay.traces.archive.record import Record
from tailreplay.traces.importers.rows import ImportReport, chat_record

__all__ = ["read"]

_COLUMNS = ["Timestamp", "Model", "Request tokens", "Response tokens"]


def read(path: Path, report: ImportReport) -> Iterator[Record]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = csv.DictReader(f)
        if rows.fieldnames is None or any(c not in rows.fieldnames for c in _COLUMNS):
            report.bad(1, f"not a BurstGPT header (needs {', '.join(_COLUMNS)})")
            return
        for line, row in enumerate(rows, start=2):
            try:
                start = round(float(row["Timestamp"]) * 1e9)
                tokens_in = int(float(row["Request tokens"]))
                tokens_out = int(float(row["Response tokens"]))
            except (ValueError, TypeError, OverflowError) as exc:
                report.bad(line, f"malformed row: {exc}")
                continue
            yield chat_record(
                path.name,
                line,
                start,
                model=row.get("Model") or None,
                input_tokens=tokens_in,
                output_tokens=tokens_out if tokens_out > 0 else None,
                error="failed" if tokens_out == 0 else None,
            )
