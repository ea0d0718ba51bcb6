"""load_columns: the C scanner and the pure-Python path give the same columns."""

from __future__ import annotations

from pathlib import Path

import msgpack
import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tailreplay.errors import ArchiveError
from tailreplay.traces.archive import columns
from tailreplay.traces.archive.columns import load_columns
from tailreplay.traces.archive.validate import record_problem
from tailreplay.traces.results.stats import STATS_FIELDS, STATS_PRESENCE
from tests.helpers import HEADER, random_maps, write_plain

FIELDS = [*STATS_FIELDS, "lag_ns", "tail", "max_tokens"]


def _both(paths: list[Path], monkeypatch: pytest.MonkeyPatch, **kw: object):
    fast = load_columns(paths, FIELDS, presence_only=STATS_PRESENCE, **kw)
    with monkeypatch.context() as m:
        m.setattr(columns, "_colscan", None)
        slow = load_columns(paths, FIELDS, presence_only=STATS_PRESENCE, **kw)
    return fast, slow


def _assert_same(a: columns.Columns, b: columns.Columns) -> None:
    assert a.n == b.n
    assert a.values.keys() == b.values.keys() and a.present.keys() == b.present.keys()
    for f in a.values:
        assert a.values[f].dtype == b.values[f].dtype, f
        np.testing.assert_array_equal(a.values[f], b.values[f], err_msg=f)
    for f in a.present:
        np.testing.assert_array_equal(a.present[f], b.present[f], err_msg=f)
    assert a.warnings == b.warnings


def test_the_c_scanner_is_built() -> None:
    # The Makefile's environment compiles traces/archive/_colscan.c; without it stats are
    # ~10x slower.
    assert columns._colscan is not None


value = (
    st.none()
    | st.integers(-(2**63), 2**64 - 1)
    | st.booleans()
    | st.floats()  # NaN and infinities too: a wrong type, damage on both paths
    | st.text(max_size=3)
)


def _verdict(
    path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool, **kw: object
) -> columns.Columns | str:
    """The columns, or the one-line error, that one path gives."""
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(columns, "_colscan", None)
        try:
            return load_columns([path], FIELDS, presence_only=STATS_PRESENCE, **kw)
        except ArchiveError as exc:
            return str(exc)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.fixed_dictionaries(
            {"start_ns": st.integers(0, 2**62 - 1) | value},
            optional={
                "duration_ns": value,
                "status": st.integers(0, 999) | value,
                "stream": st.booleans() | value,
                "lag_ns": st.integers(-(2**40), 2**40),
                "tail": st.booleans(),
                "error": st.text(max_size=5) | value,
                "path": st.sampled_from(["/v1/models", "/v1/chat/completions?a=é"])
                | st.text(max_size=30),
                "method": st.sampled_from(["GET", "POST", "post"]) | st.text(max_size=4) | value,
                "chunk_gaps_us": st.lists(st.integers(0, 2**32) | value, max_size=5),
                "req_headers": st.lists(
                    st.lists(st.text(max_size=3) | value, max_size=3), max_size=3
                ),
                "trace_id": st.binary(min_size=15, max_size=17),
                "req_body": st.binary(max_size=70_000),
                "extra_future_field": st.dictionaries(
                    st.text(max_size=3), st.integers(-(2**63), 2**63 - 1) | value, max_size=2
                ),
            },
        ),
        max_size=30,
    ),
    compress=st.booleans(),
    skip=st.booleans(),
)
def test_fast_and_python_paths_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: list[dict], compress: bool, skip: bool
) -> None:
    # Valid rows and rows with a value of the wrong type or range: the C scanner must
    # reach the Python reader's verdict (columns, or the same error) on every one.
    data = msgpack.packb(HEADER) + b"".join(msgpack.packb(r) for r in rows)
    path = tmp_path / ("a.msgpack.zst" if compress else "a.msgpack")
    path.write_bytes(zstandard.ZstdCompressor().compress(data) if compress else data)
    fast = _verdict(path, monkeypatch, True, skip_corrupt=skip)
    slow = _verdict(path, monkeypatch, False, skip_corrupt=skip)
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow
    else:
        _assert_same(fast, slow)
        valid = [r for r in rows if record_problem(r) is None]
        assert fast.n == len(valid)


@pytest.mark.parametrize("compress", [False, True])
def test_damaged_files_fall_back_with_the_same_warnings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compress: bool
) -> None:
    maps = random_maps(500)
    full = write_plain(tmp_path / "full.msgpack", maps).read_bytes()
    torn = full[: len(full) - 17]
    path = tmp_path / ("torn.msgpack.zst" if compress else "torn.msgpack")
    path.write_bytes(zstandard.ZstdCompressor().compress(torn) if compress else torn)
    clean = write_plain(tmp_path / "clean.msgpack", random_maps(300, seed=3))
    fast, slow = _both([path, clean], monkeypatch)
    _assert_same(fast, slow)
    assert fast.n == 499 + 300
    assert any("torn final record" in w for w in fast.warnings)


def test_big_zstd_file_with_records_across_chunk_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    maps = random_maps(40_000)  # several MiB decompressed: many 1 MiB chunks
    for i, m in enumerate(maps):
        m["req_body"] = bytes(i % 251 for _ in range(i % 200))
    data = msgpack.packb(HEADER) + b"".join(msgpack.packb(m) for m in maps)
    path = tmp_path / "big.msgpack.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(data))
    fast, slow = _both([path], monkeypatch)
    _assert_same(fast, slow)
    assert fast.n == 40_000
    np.testing.assert_array_equal(fast["start_ns"], [m["start_ns"] for m in maps])


def test_limits_read_a_growing_file_as_it_was_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A capture file the proxy is still writing: a load given an earlier load's
    # ``per_file`` gets those same records, on both paths, however much was appended.
    maps = random_maps(300, seed=5)
    path = write_plain(tmp_path / "live.msgpack", maps)
    other = write_plain(tmp_path / "done.msgpack", random_maps(50, seed=6))
    first = load_columns([path, other], ["duration_ns"])
    assert first.per_file == [300, 50]
    with open(path, "ab") as f:  # records are appended in completion order: any start
        for m in random_maps(120, seed=9, start_ns=maps[0]["start_ns"] - 10**9):
            f.write(msgpack.packb(m))
        f.write(msgpack.packb(maps[0])[:-3])  # and the next one half written
    fast, slow = _both([path, other], monkeypatch, limits=first.per_file)
    _assert_same(fast, slow)
    assert fast.per_file == slow.per_file == [300, 50]
    np.testing.assert_array_equal(fast["start_ns"], first["start_ns"])
    np.testing.assert_array_equal(fast["duration_ns"], first["duration_ns"])
    assert load_columns([path, other], []).per_file == [420, 50]  # unlimited: the file now


def test_string_columns_take_the_c_scanner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy's capture: methods, paths and errors are strings; stats reads them all.
    # The Python reader is made to fail, so only the scanner can produce these columns.
    maps = random_maps(3_000)
    for i, m in enumerate(maps):
        m["path"] = f"/v1/models/m{i % 7}" if i % 10 == 0 else m["path"]
        m["method"] = "GET" if i % 10 == 0 else "POST"
    path = write_plain(tmp_path / "c.msgpack", maps)
    monkeypatch.setattr(columns, "_load_python", None)
    cols = load_columns([path], FIELDS, presence_only=STATS_PRESENCE)
    assert cols["method"].tolist() == [m["method"] for m in maps]
    assert cols["path"].tolist() == [m["path"] for m in maps]
    assert cols["error"].tolist() == [m.get("error") for m in maps]
