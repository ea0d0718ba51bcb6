"""A record far out of time order never empties a slice or a peak.

``slice`` and ``peak`` stop reading at the end of their window, since what follows
in a time-ordered stream starts later. A record moved an hour later breaks that
promise for the records after it: they must still be read and kept (the reader
counts them in its out-of-order warning), as ``merge`` keeps them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.traces.archive.reader import ArchiveReader
from tests.helpers import HEADER, write_plain

T0 = 1_700_000_000 * 10**9
S = 10**9


def _maps(*, durations: bool) -> list[dict[str, Any]]:
    """A record a second for 10 minutes, and 100 more between 400 s and 410 s."""
    starts = [i * S for i in range(600)] + [400 * S + i * S // 10 for i in range(100)]
    maps = [
        {"start_ns": T0 + t, "input_tokens": 10, "output_tokens": 5, "path": "/v1/completions"}
        for t in sorted(starts)
    ]
    if durations:  # a capture: written at completion, so not in start order
        for i, m in enumerate(maps):
            m["duration_ns"] = (i * 7919 % 13) * S
        maps.sort(key=lambda m: m["start_ns"] + m["duration_ns"])
    return maps


def _archive(path: Path, *, ordered: bool, moved: int | None) -> Path:
    maps = _maps(durations=not ordered)
    if moved is not None:
        maps[moved]["start_ns"] += 3600 * S
    header = {**HEADER, "ordered": True} if ordered else HEADER
    return write_plain(path, maps, header)


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["traces", *args])
    assert result.exit_code == 0, result.output
    return result.stderr


def _count(path: Path) -> int:
    return sum(1 for _ in ArchiveReader([path], order="file"))


KINDS = pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "completion-order"])


@KINDS
def test_a_record_moved_an_hour_later_does_not_empty_a_slice(tmp_path: Path, ordered: bool) -> None:
    window = ["--from", f"{(T0 + 300 * S) / 1e9}", "--to", f"{(T0 + 360 * S) / 1e9}"]
    clean = _archive(tmp_path / "clean.msgpack", ordered=ordered, moved=None)
    _run("slice", str(clean), "-o", str(tmp_path / "a.msgpack"), *window)
    want = _count(tmp_path / "a.msgpack")
    assert want == 60
    moved = _archive(tmp_path / "moved.msgpack", ordered=ordered, moved=100)
    err = _run("slice", str(moved), "-o", str(tmp_path / "b.msgpack"), *window)
    assert _count(tmp_path / "b.msgpack") == want, err
    assert "no record matched" not in err


@KINDS
def test_a_record_moved_an_hour_later_does_not_shrink_a_peak(tmp_path: Path, ordered: bool) -> None:
    moved = _archive(tmp_path / "moved.msgpack", ordered=ordered, moved=50)
    err = _run("peak", str(moved), "-o", str(tmp_path / "p.msgpack"), "--window", "1m")
    found = re.search(r"([\d,]+) requests, .* wrote ([\d,]+) records", err)
    assert found is not None, err
    assert found[1] == found[2] == "160", err
    assert _count(tmp_path / "p.msgpack") == 160


def test_records_read_past_the_window_are_counted_in_a_warning(tmp_path: Path) -> None:
    moved = _archive(tmp_path / "moved.msgpack", ordered=True, moved=100)
    window = ["--from", f"{(T0 + 300 * S) / 1e9}", "--to", f"{(T0 + 360 * S) / 1e9}"]
    err = _run("slice", str(moved), "-o", str(tmp_path / "b.msgpack"), *window)
    assert re.search(r"warning: [\d,]+ records were out of time order", err), err
