"""Mooncake / AIPerf trace JSONL: one object a line with ``timestamp`` (ms from the
trace start), ``input_length``, ``output_length``, ``hash_ids`` (ids of 512-token
prompt blocks) and optionally ``session_id``.

Times are placed at the unix epoch plus the offset (the format has no wall clock).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tailreplay.traces.archive.record import Record
from tailreplay.traces.importers.rows import ImportReport, Place, chat_record
from tailreplay.traces.importers.text_input import lines

__all__ = ["read"]


def _is_int(v: Any) -> bool:
    return type(v) is int


def _row(obj: Any) -> dict[str, Any]:
    """The record's fields from one line's object; ValueError says what is wrong."""
    if type(obj) is not dict:
        raise ValueError(f"a JSON {type(obj).__name__}, not an object")
    ts: Any = obj.get("timestamp")
    if type(ts) not in (int, float) or not math.isfinite(ts):
        raise ValueError("timestamp must be a finite number")
    if not _is_int(obj.get("input_length")) or not _is_int(obj.get("output_length")):
        raise ValueError("input_length and output_length must be integers")
    hashes = obj.get("hash_ids") or []
    if type(hashes) is not list or not all(_is_int(h) and h >= 0 for h in hashes):
        raise ValueError("hash_ids must be a list of non-negative integers")
    session = obj.get("session_id")
    if session is not None and type(session) not in (str, int):
        raise ValueError("session_id must be a string or an integer")
    return {
        "start_ns": round(ts * 1e6),  # OverflowError past float's range
        "input_tokens": obj["input_length"],
        "output_tokens": obj["output_length"],
        "prefix_hashes": hashes or None,
        "session": None if session is None else str(session),
    }


def read(path: Path, report: ImportReport) -> Iterator[tuple[Place, Record]]:
    with open(path, "rb") as f:
        for line, text in lines(f, report):
            if not text.strip():
                continue
            try:
                row = _row(json.loads(text))
            except (ValueError, OverflowError, RecursionError) as exc:
                report.bad(line, f"malformed line: {exc}")
                continue
            start = row.pop("start_ns")
            yield line, chat_record(path.name, line, start, **row)
