"""A report side read through the C scanner and through the careful reader is the same
side: every column, key, label, gap, failure kind, message, idle call and warning; and
a damaged file gets the same verdict either way (the careful reader's)."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from tailreplay.errors import ArchiveCorrupt
from tailreplay.report.request_keys import KeyIndex
from tailreplay.report.side import Side, load_side
from tailreplay.traces.archive import column_chunks, column_scan

T0 = 1_700_000_000 * 10**9
HEADER = {"format": "tailreplay", "version": 1, "source": "replay"}
_COLUMNS = (
    "start_ns",
    "duration_ns",
    "ttfb_ns",
    "ttft_content_ns",
    "ttst_ns",
    "input_tokens",
    "output_tokens",
    "stream",
    "error",
    "lag_ns",
    "shard",
    "phase",
    "model",
    "path",
    "session",
    "tail",
    "estimated",
    "retry",
    "cancelled",
    "key",
    "keyed",
)


def _record(rng: random.Random, i: int, traces: list[bytes]) -> dict[str, Any]:
    """A record with every field a side reads, each present or not, in varied values."""
    m: dict[str, Any] = {"start_ns": T0 + i * 1000, "trace_id": rng.choice(traces)}
    if rng.random() < 0.9:
        m["span_id"] = rng.randbytes(8)
    if rng.random() < 0.3:
        m["orig_trace_id"], m["orig_span_id"] = rng.choice(traces), rng.randbytes(8)
    if rng.random() < 0.2:
        m["shadow_of"] = rng.randbytes(8)
    for name in ("duration_ns", "ttfb_ns", "ttft_content_ns", "input_tokens", "lag_ns"):
        if rng.random() < 0.8:
            m[name] = rng.randint(0, 10**9)
    m["status"] = rng.choice([0, 200, 200, 200, 429, 500])
    if rng.random() < 0.15:
        m["error"] = rng.choice(["", "cancelled", "upstream_reset", "http_500"])
    if rng.random() < 0.3:
        m["error_message"] = rng.choice(["", "overloaded", "ünïcode"])
    m["method"] = rng.choice(["POST", "POST", "POST", "GET"])
    m["path"] = rng.choice(["/v1/chat/completions", "/v1/models?x=1", "/tokenize", "/v1/x?q"])
    for name, values in (("phase", "ab"), ("model", "mn"), ("session", "st")):
        if rng.random() < 0.5:
            m[name] = rng.choice(values)
    m["tokens_source"] = rng.choice(["usage", "estimate"])
    m["stream"], m["tail"] = rng.random() < 0.7, rng.random() < 0.2
    m["attempt"] = rng.randint(1, 3)
    m["chunk_gaps_us"] = [rng.choice([0, rng.randint(1, 10**7)]) for _ in range(rng.randint(0, 5))]
    if rng.random() < 0.1:
        m["chunk_gaps_more"] = [rng.randint(-1, 3000) for _ in range(rng.randint(1, 5))]
    if rng.random() < 0.05:
        m["duration_ns"] = None  # nil is absent
    return m


def _archive(path: Path, n: int, seed: int = 0) -> list[bytes]:
    """Write ``n`` records to ``path``; return each record's packed bytes after the header."""
    rng = random.Random(seed)
    traces = [rng.randbytes(16) for _ in range(max(n // 3, 1))]
    records = [msgpack.packb(_record(rng, i, traces)) for i in range(n)]
    path.write_bytes(msgpack.packb(HEADER) + b"".join(records))
    return records


def _careful(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(column_scan, "_colscan", None)


def _fast_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> Any:
        raise AssertionError("a clean file went to the careful reader")

    monkeypatch.setattr(column_chunks, "_careful_chunks", refuse)


def _same(a: Side, b: Side) -> None:
    for name in _COLUMNS:
        x, y = getattr(a, name), getattr(b, name)
        if name == "key":
            x, y = x.tobytes(), y.tobytes()
        assert np.array_equal(x, y), name
    assert a.labels == b.labels
    assert a.itl_us.percentiles() == b.itl_us.percentiles()
    assert a.itl_us.total == b.itl_us.total and a.itl_us.zeros == b.itl_us.zeros
    assert list(a.error_kinds.items()) == list(b.error_kinds.items())
    assert a.error_messages == b.error_messages
    assert a.idle.rows() == b.idle.rows()
    assert sorted(a.idle.keys.tolist()) == sorted(b.idle.keys.tolist())
    assert a.warnings == b.warnings


OPTIONS: list[dict[str, Any]] = [
    {},
    {"classes": ["model", "session"]},
    {"classes": ["path"]},
    {"shadows": "only"},
]


@pytest.mark.parametrize("options", OPTIONS)
def test_a_clean_archive_gives_the_same_side_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    path = tmp_path / "a.msgpack"
    _archive(path, 3000)
    with monkeypatch.context() as m:
        _fast_only(m)
        fast = load_side([path], **options)
    with monkeypatch.context() as m:
        _careful(m)
        careful = load_side([path], **options)
    assert careful.n > 300 and careful.error_kinds and careful.itl_us.total
    if not options:
        assert careful.error_messages and careful.idle.paths
    _same(fast, careful)


def test_a_kept_set_selects_the_same_requests_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.msgpack"
    _archive(path, 2000, seed=3)
    every = load_side([path])
    keep = KeyIndex(every.key[every.keyed][::3])
    fast = load_side([path], keep=keep)
    with monkeypatch.context() as m:
        _careful(m)
        careful = load_side([path], keep=keep)
    assert 0 < fast.n < every.n
    _same(fast, careful)


def test_chunks_of_every_size_give_the_same_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scanner calls cut short by their record or item bound join up as one file."""
    path = tmp_path / "a.msgpack"
    _archive(path, 1500, seed=5)
    whole = load_side([path])
    with monkeypatch.context() as m:
        m.setattr(column_chunks, "_SCAN_RECORDS", 7)
        m.setattr(column_chunks, "_SCAN_ITEMS", 3)
        _fast_only(m)
        cut = load_side([path])
    _same(whole, cut)


def _damaged(path: Path, records: list[bytes], how: str) -> None:
    head = msgpack.packb(HEADER)
    middle = len(records) // 2
    body = b"".join(records)
    at = len(head) + sum(len(r) for r in records[:middle])
    if how == "torn":  # a writer killed part-way through the last record
        path.write_bytes(head + body[: len(body) - 3])
    elif how == "garbage":
        path.write_bytes(head + body[: at - len(head)] + os.urandom(7) + body[at - len(head) :])
    else:  # a valid map that is no valid record
        bad = msgpack.packb({"start_ns": T0, "status": "200"})
        path.write_bytes(head + body[: at - len(head)] + bad + body[at - len(head) :])


@pytest.mark.parametrize("how", ["torn", "garbage", "invalid"])
@pytest.mark.parametrize("skip_corrupt", [False, True])
def test_a_damaged_archive_gets_the_same_verdict_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, skip_corrupt: bool
) -> None:
    # Large enough that the scanner hands on whole chunks before it meets the damage:
    # what it handed on is dropped, the careful reader's account is the side.
    clean = tmp_path / "clean.msgpack"
    path = tmp_path / "a.msgpack"
    _damaged(path, _archive(clean, 3000, seed=7), how)

    def side() -> Side | str:
        try:
            return load_side([clean, path], skip_corrupt=skip_corrupt)
        except ArchiveCorrupt as exc:
            return str(exc)

    with monkeypatch.context() as m:
        m.setattr(column_chunks, "_SCAN_RECORDS", 500)
        fast = side()
    with monkeypatch.context() as m:
        _careful(m)
        careful = side()
    if isinstance(careful, str):
        assert how != "torn" and not skip_corrupt
        assert fast == careful
        return
    assert isinstance(fast, Side)
    assert careful.warnings and careful.n > load_side([clean]).n + 1000
    _same(fast, careful)
