"""read_parts: the C scanner's chunks and the careful reader's are the same columns
(ints, str codes, fixed-size bins, array items), or the same error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailreplay.errors import ArchiveError
from tailreplay.traces.archive import column_chunks, column_scan
from tailreplay.traces.archive.column_chunks import ChunkFields, ColumnChunk, Strings, read_parts
from tailreplay.traces.archive.reader import ArchiveReader

HEADER = {"format": "tailreplay", "version": 1, "source": "test"}
FIELDS = ChunkFields(
    valued=("start_ns", "status", "stream", "path", "model", "trace_id", "chunk_gaps_us"),
    presence=("error_message",),
)


class _Collect:
    """A part that keeps every chunk's columns (the mask applied to values)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, chunk: ColumnChunk) -> None:
        lengths = chunk.values["chunk_gaps_us"]
        items = chunk.items["chunk_gaps_us"].tolist()
        starts = np.cumsum(lengths) - lengths
        for i in range(chunk.n):
            row: dict[str, Any] = {f: bool(chunk.present[f][i]) for f in chunk.present}
            for f, v in chunk.values.items():
                row[f"{f}="] = int(v[i]) if chunk.present[f][i] else None
            row["trace_id="] = chunk.bins["trace_id"][i].tobytes()
            row["gaps"] = items[starts[i] : starts[i] + lengths[i]]
            row["record"] = chunk.record(i)
            self.rows.append(row)


def _read(path: Path, skip_corrupt: bool) -> tuple[list[list[dict[str, Any]]], list[str]] | str:
    strings = Strings()
    try:
        reader = ArchiveReader([path], order="file", skip_corrupt=skip_corrupt)
        parts = read_parts(reader, FIELDS, _Collect, strings)
    except ArchiveError as exc:
        return str(exc)
    texts = [strings.text(i) for i in range(len(strings.codes))]
    for part in parts:  # codes as the values they stand for: numbering may differ
        for row in part.rows:
            for f in ("path=", "model="):
                row[f] = None if row[f] is None else texts[row[f]]
    return [p.rows for p in parts], reader.warnings()


value = st.none() | st.integers(-(2**63), 2**64 - 1) | st.booleans() | st.text(max_size=3)
VALID = {
    "status": st.integers(0, 999),
    "stream": st.booleans(),
    "path": st.sampled_from(["/a", "/b?x", "/c/d"]),
    "model": st.text(max_size=4),
    "trace_id": st.binary(min_size=16, max_size=16),
    "chunk_gaps_us": st.lists(st.integers(0, 2**62 - 1), max_size=4),
    "error_message": st.text(max_size=3),
    "other": value | st.lists(value, max_size=2),
}
HOSTILE = {
    "status": value,
    "stream": value,
    "path": st.sampled_from(["//c", "/d e", "x"]) | value,
    "model": value,
    "trace_id": st.binary(max_size=17) | value,
    "chunk_gaps_us": st.lists(st.integers(0, 2**62 - 1) | value, max_size=4) | value,
    "error_message": value,
}


def _rows(hostile: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Records of valid values (the scanner takes them), or now and then anything."""
    fields = {
        name: (valid | HOSTILE[name]) if hostile and name in HOSTILE else valid
        for name, valid in VALID.items()
    }
    start = st.integers(0, 2**62 - 1) | value if hostile else st.integers(0, 2**62 - 1)
    return st.fixed_dictionaries({"start_ns": start}, optional=fields)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(_rows(hostile=False), max_size=12) | st.lists(_rows(hostile=True), max_size=12),
    tail=st.sampled_from([b"", b"", b"\x85\xa1", b"\xc1", b"\x00\x00"]),
    skip_corrupt=st.booleans(),
)
def test_scanned_and_careful_chunks_agree(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    rows: list[dict[str, Any]],
    tail: bytes,
    skip_corrupt: bool,
) -> None:
    path = tmp_path / "a.msgpack"
    path.write_bytes(msgpack.packb(HEADER) + b"".join(msgpack.packb(r) for r in rows) + tail)
    with monkeypatch.context() as m:
        m.setattr(column_chunks, "_SCAN_RECORDS", 3)  # several calls, a part dropped part-way
        m.setattr(column_chunks, "_SCAN_ITEMS", 2)
        fast = _read(path, skip_corrupt)
    with monkeypatch.context() as m:
        m.setattr(column_scan, "_colscan", None)
        careful = _read(path, skip_corrupt)
    assert fast == careful


def test_a_clean_file_is_scanned_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a.msgpack"
    rows = [
        {"start_ns": i, "trace_id": bytes([i]) * 16, "chunk_gaps_us": list(range(i)), "path": "/a"}
        for i in range(50)
    ]
    path.write_bytes(msgpack.packb(HEADER) + b"".join(msgpack.packb(r) for r in rows))

    def refuse(*args: Any) -> Any:
        raise AssertionError("a clean file went to the careful reader")

    monkeypatch.setattr(column_chunks, "_careful_chunks", refuse)
    got = _read(path, False)
    assert not isinstance(got, str)
    (part,), warnings = got
    assert not warnings and [r["gaps"] for r in part] == [list(range(i)) for i in range(50)]
    assert [r["trace_id="] for r in part] == [bytes([i]) * 16 for i in range(50)]


def test_fields_a_chunk_cannot_hold_are_refused() -> None:
    with pytest.raises(ValueError, match="start_ns"):
        ChunkFields(valued=("status",))
    with pytest.raises(ValueError, match="fixed size"):
        ChunkFields(valued=("start_ns", "req_body"))
    with pytest.raises(ValueError, match="int64"):
        ChunkFields(valued=("start_ns", "prefix_hashes"))
    with pytest.raises(ValueError, match="column"):
        ChunkFields(valued=("start_ns", "req_headers"))
