"""BurstGPT: Timestamp (s from the trace start), Model, Request tokens, Response tokens,
Total tokens, Log Type. A row with 0 response tokens is a failed request."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from tailreplay.traces.archive.record import Record
from tailreplay.traces.importers.rows import ImportReport, Place, chat_record
from tailreplay.traces.importers.text_input import csv_rows

__all__ = ["read"]

_COLUMNS = ["Timestamp", "Model", "Request tokens", "Response tokens"]


def _number(text: str, name: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} {text.strip()[:20]!r} is not a finite number >= 0")
    return value


def read(path: Path, report: ImportReport) -> Iterator[tuple[Place, Record]]:
    with open(path, "rb") as f:
        rows = csv_rows(f, report)
        first = next(rows, None)
        names = [h.strip() for h in first[1]] if first else []
        if first is None or any(c not in names for c in _COLUMNS):
            report.bad(
                first[0] if first else 1, f"not a BurstGPT header (needs {', '.join(_COLUMNS)})"
            )
            return
        at = {c: names.index(c) for c in _COLUMNS}
        for line, row in rows:
            try:
                fields = {c: row[i] for c, i in at.items()}
                start = round(_number(fields["Timestamp"], "Timestamp") * 1e9)
                tokens_in = int(_number(fields["Request tokens"], "Request tokens"))
                tokens_out = int(_number(fields["Response tokens"], "Response tokens"))
            except (ValueError, IndexError, OverflowError) as exc:
                report.bad(line, f"malformed row: {exc}")
                continue
            yield (
                line,
                chat_record(
                    path.name,
                    line,
                    start,
                    model=fields["Model"] or None,
                    input_tokens=tokens_in,
                    output_tokens=tokens_out if tokens_out > 0 else None,
                    error="failed" if tokens_out == 0 else None,
                ),
            )
