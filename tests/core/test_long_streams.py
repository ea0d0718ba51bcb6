"""A stream of any length costs a timeline the same memory: its first gaps kept as they
came, the rest counted in 1% bins, from which ITL percentiles are within 1%; archives,
reports and spans read both parts."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.dialects import dialect_named
from tailreplay.exporters.spans import span_attributes
from tailreplay.http.sse import EXACT_GAPS, StreamTimeline, flat_bins
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record
from tailreplay.traces.archive.writer import ArchiveWriter

EVENT = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
T0 = 1_700_000_000 * 10**9

CHAT = dialect_named("chat")


def _stream(gaps_us: np.ndarray) -> StreamTimeline:
    timeline = StreamTimeline(CHAT)
    now = 10**12
    timeline.feed(EVENT, now)
    for gap in gaps_us:
        now += int(gap) * 1000
        timeline.feed(EVENT, now)
    return timeline


def _gaps(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(9, 1, n).astype(np.int64) + 1


def test_a_long_streams_timeline_stays_small() -> None:
    """200,000 tokens: the list stops at EXACT_GAPS; the rest are a few hundred bins."""
    gaps = _gaps(200_000)
    tracemalloc.start()
    try:
        timeline = _stream(gaps)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert timeline.tokens == 200_001
    assert len(timeline.gaps_us) == EXACT_GAPS
    assert sum(timeline.more.values()) == 200_000 - EXACT_GAPS
    assert len(timeline.more) < 2_000 and peak < 2 << 20  # a list of 200,000 ints: ~7 MB


def test_a_long_streams_itl_percentiles_are_within_one_percent(tmp_path: Path) -> None:
    gaps = _gaps(60_000, seed=2)
    timeline = _stream(gaps)
    record = Record(
        start_ns=T0,
        stream=True,
        status=200,
        method="POST",
        path="/v1/chat/completions",
        chunk_gaps_us=timeline.gaps_us,
        chunk_gaps_more=flat_bins(timeline.more),
    )
    path = tmp_path / "long.msgpack"
    with ArchiveWriter(path, header=make_header("test")) as writer:
        writer.append(record)
    (back,) = ArchiveReader([path])
    assert back.chunk_gaps_more == record.chunk_gaps_more
    report = tmp_path / "r.json"
    done = CliRunner().invoke(cli, ["report", "--replay-only", "--json", str(report), str(path)])
    assert done.exit_code == 0, done.output
    itl = json.loads(report.read_text())["overall"]["replayed"]["metrics"]["itl"]
    for q, pct in (("p50", 50), ("p99", 99)):
        exact_ms = float(np.percentile(gaps, pct)) / 1e3
        assert itl[q]["value"] == pytest.approx(exact_ms, rel=0.011), q
    attrs = span_attributes(back, provider="openai", server=None)
    assert attrs["tailreplay.itl.p99_ms"] == pytest.approx(np.percentile(gaps, 99) / 1e3, rel=0.011)
    assert attrs["tailreplay.itl.max_ms"] >= gaps.max() / 1e3 * 0.99


def test_a_short_stream_keeps_every_gap_exactly() -> None:
    gaps = _gaps(500, seed=3)
    timeline = _stream(gaps)
    assert timeline.gaps_us == [int(g) for g in gaps] and timeline.more == {}
    assert flat_bins(timeline.more) is None
