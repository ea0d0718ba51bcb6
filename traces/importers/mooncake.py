"""Mooncake / AIPerf trace JSONL: one object a line with ``timestamp`` (ms from the
trace start), ``input_length``, ``output_length``, ``hash_ids`` (ids of 512-token
prompt blocks) and optionally ``session_id``.

Times are placed at the unix epoch plus the offset (the format has no wall clock).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from tailreplay.traces.archive.record import Record
from tailreplay.traces.importers.rows import ImportReport, chat_record

__all__ = ["read"]


def read(path: Path, report: ImportReport) -> Iterator[Record]:
    with open(path, encoding="utf-8") as f:
        for line, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
                ts = obj["timestamp"]
                tokens_in, tokens_out = obj["input_length"], obj["output_length"]
                hashes = obj.get("hash_ids") or []
                if (
                    not isinstance(ts, int | float)
                    or not isinstance(tokens_in, int)
                    or not isinstance(tokens_out, int)
                ):
                    raise ValueError("timestamp, input_length and output_length must be numbers")
                if not isinstance(hashes, list) or not all(
                    isinstance(h, int) and h >= 0 for h in hashes
                ):
                    raise ValueError("hash_ids must be a list of non-negative integers")
            except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
                report.bad(line, f"malformed line: {exc}")
                continue
            session = obj.get("session_id")
            yield chat_record(
                path.name,
                line,
                round(ts * 1e6),
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                prefix_hashes=hashes or None,
                session=None if session is None else str(session),
            )
