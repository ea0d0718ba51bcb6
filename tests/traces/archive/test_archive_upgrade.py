"""Reading older archives: ``format.UPGRADES`` brings each record up to the current version.

The version-0 files here are fabricated with a bare msgpack loop in an invented old
shape: version 0 called the field ``latency_ns`` that version 1 calls ``duration_ns``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from click.testing import CliRunner, Result

from tailreplay.cli import cli
from tailreplay.errors import ArchiveVersionError
from tailreplay.traces.archive import format as fmt
from tailreplay.traces.archive.reader import ArchiveReader, read_header
from tests.helpers import HEADER, random_maps, write_plain

V0_HEADER = {
    "format": "tailreplay",
    "version": 0,
    "created_ns": 1_600_000_000 * 10**9,
    "source": "proxy",
}
N = 500


def _v0_maps(n: int = N) -> list[dict[str, Any]]:
    """Version-0 records: ``latency_ns`` where version 1 has ``duration_ns``."""
    return [
        {
            "start_ns": 1_600_000_000 * 10**9 + i * 10**7,
            "latency_ns": (i % 97 + 1) * 3 * 10**6 + i,  # distinct, out of order
            "status": 200,
            "input_tokens": 20 + i % 13,
            "output_tokens": 5 + i % 7,
            "model": "m0",
        }
        for i in range(n)
    ]


def _upgraded(m: dict[str, Any]) -> dict[str, Any]:
    """What the version-0 map ``m`` is in version 1 (written out by hand)."""
    new = {k: v for k, v in m.items() if k != "latency_ns"}
    new["duration_ns"] = m["latency_ns"]
    return new


def _write(path: Path, header: dict[str, Any], maps: list[dict[str, Any]]) -> Path:
    with open(path, "wb") as f:
        f.write(msgpack.packb(header))
        for m in maps:
            f.write(msgpack.packb(m))
    return path


@pytest.fixture
def v0_file(tmp_path: Path) -> Path:
    return _write(tmp_path / "old.msgpack", V0_HEADER, _v0_maps())


@pytest.fixture
def upgrade_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Register an upgrade from version 0; the returned list holds every map it was given."""
    calls: list[dict[str, Any]] = []

    def upgrade(m: dict[str, Any]) -> dict[str, Any]:
        calls.append(dict(m))
        m["duration_ns"] = m.pop("latency_ns")
        return m

    monkeypatch.setitem(fmt.UPGRADES, 0, upgrade)
    return calls


def _stats(*paths: Path) -> Result:
    return CliRunner().invoke(cli, ["traces", "stats", "--json", *map(str, paths)])


def test_iter_maps_yields_every_record_upgraded(
    v0_file: Path, upgrade_calls: list[dict[str, Any]]
) -> None:
    reader = ArchiveReader([v0_file], order="file")
    # Opening reads the header alone: no record is upgraded yet.
    assert upgrade_calls == []
    assert list(reader.iter_maps()) == [_upgraded(m) for m in _v0_maps()]
    # Once per record, never on the header, which keeps its own version.
    assert upgrade_calls == _v0_maps()
    assert reader.headers == [V0_HEADER]
    assert reader.warnings() == []


def test_records_carry_the_upgraded_duration(
    v0_file: Path, upgrade_calls: list[dict[str, Any]]
) -> None:
    records = list(ArchiveReader([v0_file]))
    want = sorted(_v0_maps(), key=lambda m: m["start_ns"])
    assert len(records) == N
    assert [r.start_ns for r in records] == [m["start_ns"] for m in want]
    assert [r.duration_ns for r in records] == [m["latency_ns"] for m in want]
    assert [r.output_tokens for r in records] == [m["output_tokens"] for m in want]


def test_only_older_files_are_upgraded(
    tmp_path: Path, v0_file: Path, upgrade_calls: list[dict[str, Any]]
) -> None:
    current = random_maps(50, start_ns=1_600_000_000 * 10**9 + 5 * 10**6)
    v1_file = write_plain(tmp_path / "new.msgpack", current)
    reader = ArchiveReader([v0_file, v1_file], order="file")
    upgrade_calls.clear()
    assert list(reader.iter_maps()) == [_upgraded(m) for m in _v0_maps()] + current
    assert upgrade_calls == _v0_maps()
    # In time order, the two files' records interleave; every one has a duration.
    merged = list(ArchiveReader([v1_file, v0_file]))
    assert len(merged) == N + 50
    starts = [r.start_ns for r in merged]
    assert starts == sorted(starts)
    assert sum(r.duration_ns is not None for r in merged) == N + sum(
        "duration_ns" in m for m in current
    )


def test_stats_reports_the_upgraded_durations(
    v0_file: Path, upgrade_calls: list[dict[str, Any]]
) -> None:
    result = _stats(v0_file)
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert got["records"] == N
    assert got["error_rate"] == 0
    latencies_ms = [m["latency_ns"] / 1e6 for m in _v0_maps()]
    want = np.percentile(latencies_ms, [50, 95, 99, 99.9])
    names = ("p50", "p95", "p99", "p999")
    assert got["latency_ms"] == pytest.approx(dict(zip(names, want, strict=True)))
    assert {m["start_ns"] for m in upgrade_calls} == {m["start_ns"] for m in _v0_maps()}


def test_without_an_upgrade_reading_fails_naming_the_file(v0_file: Path) -> None:
    assert 0 not in fmt.UPGRADES
    message = f"{v0_file}: no upgrade from archive format version 0"
    with pytest.raises(ArchiveVersionError) as exc:
        ArchiveReader([v0_file])
    assert str(exc.value) == message
    with pytest.raises(ArchiveVersionError) as exc:
        read_header(v0_file)
    assert str(exc.value) == message

    result = _stats(v0_file)
    assert result.exit_code == 3
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"Error: {message}"]


@pytest.mark.parametrize("register", [False, True], ids=["no-upgrades", "with-upgrade"])
def test_newer_version_exits_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, register: bool
) -> None:
    if register:  # an upgrade table cannot help with a file from the future
        upgrade: Callable[[dict[str, Any]], dict[str, Any]] = _upgraded
        monkeypatch.setitem(fmt.UPGRADES, 0, upgrade)
    newer = fmt.VERSION + 1
    path = write_plain(tmp_path / "future.msgpack", random_maps(5), {**HEADER, "version": newer})
    with pytest.raises(ArchiveVersionError, match="newer than this tailreplay reads"):
        ArchiveReader([path])

    result = _stats(path)
    assert result.exit_code == 3
    lines = result.stderr.splitlines()
    assert lines == [
        f"Error: {path}: archive format version {newer} is newer than this tailreplay reads "
        f"(version {fmt.VERSION}); upgrade tailreplay"
    ]
