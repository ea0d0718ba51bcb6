"""Property tests: records survive writing, rotation, compression and merging."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailreplay.cli import cli
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record
from tailreplay.traces.archive.writer import ArchiveWriter

times = st.integers(min_value=0, max_value=2**62 - 1)  # the valid range of a time in ns
small = st.integers(min_value=0, max_value=2**31)
text = st.text(max_size=40)
# What a request line may hold: a target, and headers (a name token, a value with no
# line break); tests/archive_strategies.py has the hostile rest.
_visible = st.characters(min_codepoint=0x21, exclude_characters="\x7f", exclude_categories=["Cs"])
_one_line = st.characters(exclude_characters="\r\n\x00", exclude_categories=["Cs"])
target = st.builds(lambda t: "/" + t.lstrip("/"), st.text(_visible, max_size=40))
header = st.tuples(st.from_regex(r"\A[A-Za-z0-9-]{1,20}\Z"), st.text(_one_line, max_size=40))
maybe = st.none


def _records(min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[list[Record]]:
    record = st.builds(
        Record,
        start_ns=times,
        trace_id=maybe() | st.binary(min_size=16, max_size=16),
        span_id=maybe() | st.binary(min_size=8, max_size=8),
        parent_span_id=maybe() | st.binary(min_size=8, max_size=8),
        duration_ns=maybe() | small,
        ttfb_ns=maybe() | small,
        chunk_gaps_us=maybe() | st.lists(small, max_size=20),
        method=maybe() | st.sampled_from(["GET", "POST"]),
        path=maybe() | target,
        status=maybe() | st.integers(0, 599),
        req_headers=maybe() | st.lists(header, max_size=4),
        req_body=maybe() | st.binary(max_size=300),
        model=maybe() | text,
        stream=maybe() | st.booleans(),
        input_tokens=maybe() | small,
        output_tokens=maybe() | small,
        tokens_source=maybe() | st.sampled_from(["usage", "estimate"]),
        max_tokens=maybe() | small,
        finish_reason=maybe() | text,
        prefix_hashes=maybe() | st.lists(st.integers(0, 2**64 - 1), max_size=8),
        session=maybe() | text,
        bytes_in=maybe() | small,
        bytes_out=maybe() | small,
        error=maybe() | text,
        orig_trace_id=maybe() | st.binary(min_size=16, max_size=16),
        intended_ns=maybe() | times,
        lag_ns=maybe() | st.integers(-(2**40), 2**40),
        tail=maybe() | st.booleans(),
        shard=maybe() | st.integers(0, 64),
    )
    return st.lists(record, min_size=min_size, max_size=max_size)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(records=_records(), compress=st.booleans(), packed=st.booleans())
def test_arbitrary_records_round_trip(
    tmp_path: Path, records: list[Record], compress: bool, packed: bool
) -> None:
    # packed: each record packed by append, in the caller's thread (the replayer's way)
    path = tmp_path / ("r.msgpack.zst" if compress else "r.msgpack")
    with ArchiveWriter(path, header=make_header("test"), pack_on_append=packed) as writer:
        for r in records:
            assert writer.append(r)
    assert writer.stats.written == len(records) and writer.stats.dropped == 0
    got = list(ArchiveReader([path], order="file"))
    assert got == records


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    records=_records(min_size=1, max_size=80), rotate=st.integers(60, 2000), packed=st.booleans()
)
def test_rotation_loses_nothing(
    tmp_path: Path, records: list[Record], rotate: int, packed: bool
) -> None:
    out = tmp_path / f"rot-{time.monotonic_ns()}"
    out.mkdir()
    writer = ArchiveWriter(directory=out, prefix="cap", header=make_header("test"),
                           rotate_bytes=rotate, pack_on_append=packed)  # fmt: skip
    for r in records:
        writer.append(r)
    writer.close()
    files = sorted(out.iterdir())
    assert files == sorted(writer.paths)
    got = [r for f in writer.paths for r in ArchiveReader([f], order="file")]
    assert got == records


def test_rotation_by_size_and_time_names_files(tmp_path: Path) -> None:
    writer = ArchiveWriter(
        directory=tmp_path,
        prefix="prod",
        header=make_header("proxy"),
        rotate_bytes=10_000,
        rotate_interval_s=0.3,
        flush_interval=0.05,
    )
    for i in range(200):  # ~30 bytes each: two or so size rotations
        writer.append(Record(start_ns=i, path="/v1/chat/completions"))
    time.sleep(0.8)  # then at least one rotation by age
    writer.append(Record(start_ns=1000))
    writer.close()
    names = [p.name for p in writer.paths]
    assert len(names) >= 2
    pattern = re.compile(r"prod-\d{8}T\d{6}Z-[^-]+-" + str(os.getpid()) + r"-(\d{4})\.msgpack")
    seqs = []
    for name in names:
        m = pattern.fullmatch(name)
        assert m, name
        seqs.append(int(m.group(1)))
    assert seqs == list(range(len(names)))
    assert sum(1 for _ in ArchiveReader(writer.paths)) == 201


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    files=st.lists(
        st.lists(
            st.tuples(st.integers(0, 10**12), st.integers(0, 10**10)), min_size=0, max_size=30
        ),
        min_size=1,
        max_size=4,
    )
)
def test_merge_is_sorted_with_every_record_once(
    tmp_path: Path, files: list[list[tuple[int, int]]]
) -> None:
    d = tmp_path / f"m-{time.monotonic_ns()}"
    d.mkdir()
    inputs = []
    expected = []
    for i, pairs in enumerate(files):
        # As a proxy writes them: in completion order (start + duration), not start order.
        recs = [
            Record(start_ns=s, duration_ns=dur, span_id=i.to_bytes(4, "big") + j.to_bytes(4, "big"))
            for j, (s, dur) in enumerate(pairs)
        ]
        recs.sort(key=lambda r: r.start_ns + (r.duration_ns or 0))
        expected += recs
        path = d / f"in{i}.msgpack"
        with ArchiveWriter(path, header=make_header("proxy", capture={"timeout_s": 10})) as w:
            for r in recs:
                w.append(r)
        inputs.append(str(path))
    out = d / "merged.msgpack"
    result = CliRunner().invoke(cli, ["traces", "merge", *inputs, "-o", str(out)])
    assert result.exit_code == 0, result.output
    got = list(ArchiveReader([out], order="file"))
    assert [r.start_ns for r in got] == sorted(r.start_ns for r in expected)
    assert sorted(r.span_id or b"" for r in got) == sorted(r.span_id or b"" for r in expected)


def test_merge_refuses_to_overwrite_an_input(tmp_path: Path) -> None:
    path = tmp_path / "a.msgpack"
    with ArchiveWriter(path, header=make_header("t")) as w:
        w.append(Record(start_ns=1))
    result = CliRunner().invoke(cli, ["traces", "merge", str(path), "-o", str(path)])
    assert result.exit_code == 2
    assert "also an input" in result.output
    assert len(list(ArchiveReader([path]))) == 1


@pytest.mark.parametrize("name", ["a.msgpack", "a.msgpack.zst"])
def test_files_are_created_0600(tmp_path: Path, name: str) -> None:
    old = os.umask(0)
    try:
        with ArchiveWriter(tmp_path / name, header=make_header("t")) as w:
            w.append(Record(start_ns=1))
        rot = ArchiveWriter(directory=tmp_path, header=make_header("t"), rotate_bytes=50)
        for i in range(5):
            rot.append(Record(start_ns=i, path="/x" * 20))
        rot.close()
    finally:
        os.umask(old)
    for p in [tmp_path / name, *rot.paths]:
        assert (p.stat().st_mode & 0o777) == 0o600, p
    # An existing file with wider permissions is tightened when rewritten.
    existing = tmp_path / "wide.msgpack"
    existing.write_bytes(b"")
    existing.chmod(0o644)
    with ArchiveWriter(existing, header=make_header("t")):
        pass
    assert (existing.stat().st_mode & 0o777) == 0o600
