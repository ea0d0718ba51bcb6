"""Version 2's checks as docs/archive-format.md ("Checksums") lays them out, version-1
files read as before and saying what they lack, ``traces upgrade``, and a key twice."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import msgpack
import pytest
import xxhash
import zstandard
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.errors import ArchiveCorrupt, ArchiveError
from tailreplay.traces.archive.columns import load_columns
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.writer import ArchiveWriter
from tests.helpers import HEADER, one_verdict, random_maps, write_plain


def _digest(data: bytes) -> bytes:
    return xxhash.xxh3_64_intdigest(data).to_bytes(8, "big")


def _by_hand(path: Path, batches: list[list[dict[str, Any]]]) -> Path:
    """A version-2 file built from the layout the docs give, with no tailreplay code."""
    head = msgpack.packb({**HEADER, "version": 2})
    out = head + b"\xd7\x68" + _digest(head)
    for maps in batches:
        batch = b"".join(msgpack.packb(m) for m in maps)
        marker = b"\xc7\x14\x62" + len(batch).to_bytes(4, "big") + len(maps).to_bytes(4, "big")
        marker += _digest(batch)
        out += marker + _digest(marker)[4:] + batch
    path.write_bytes(out)
    return path


def _read(path: Path, **options: Any) -> tuple[list[dict[str, Any]], ArchiveReader]:
    reader = ArchiveReader([path], order="file", **options)
    return list(reader.iter_maps()), reader


def test_a_file_made_from_the_documented_layout_reads_checked(tmp_path: Path) -> None:
    maps = random_maps(30)
    path = _by_hand(tmp_path / "a.msgpack", [maps[:10], maps[10:]])
    got, reader = _read(path)
    assert got == maps and reader.warnings() == [] and reader.reports[0].checked
    assert load_columns([path], ["duration_ns"]).n == 30
    written = tmp_path / "w.msgpack"
    with ArchiveWriter(written, header=dict(HEADER)) as w:  # one flush: one batch
        for m in maps[:10]:
            w.append(m)
    # The writer's bytes are the documented ones (its header carries created_ns anew).
    data = written.read_bytes()
    end = len(msgpack.packb(ArchiveReader([written]).headers[0]))
    hand = _by_hand(tmp_path / "b.msgpack", [maps[:10]]).read_bytes()
    assert data[end : end + 10] == b"\xd7\x68" + _digest(data[:end])
    assert data[end + 10 :] == hand[len(msgpack.packb({**HEADER, "version": 2})) + 10 :]


def test_zstd_d_of_a_compressed_archive_is_the_plain_archive(tmp_path: Path) -> None:
    maps = random_maps(50)
    path = tmp_path / "a.msgpack.zst"
    with ArchiveWriter(path, header=make_header("test")) as w:
        for m in maps:
            w.append(m)
    plain = tmp_path / "a.msgpack"
    with open(path, "rb") as src:  # as `zstd -d` does: every frame, skippable ones skipped
        plain.write_bytes(
            zstandard.ZstdDecompressor().stream_reader(src, read_across_frames=True).read()
        )
    got, reader = _read(plain)
    assert got == maps and reader.reports[0].checked and reader.warnings() == []


def test_a_version_1_file_reads_and_says_it_has_no_checksums(tmp_path: Path) -> None:
    maps = random_maps(20)
    old = write_plain(tmp_path / "old.msgpack", maps)  # the version-1 layout, byte for byte
    got, reader = _read(old)
    assert got == maps and reader.warnings() == []
    report = reader.reports[0]
    assert not report.checked and "format version 1: no checksums" in report.integrity
    inspect = CliRunner().invoke(cli, ["traces", "inspect", str(old)])
    assert inspect.exit_code == 0
    assert "integrity: format version 1: no checksums" in inspect.stdout
    stats = CliRunner().invoke(cli, ["traces", "stats", "--json", str(old)])
    assert stats.exit_code == 0 and "note:" in stats.stderr and "no checksums" in stats.stderr
    # Damage in it is found only where a record stops being valid: what it lacks.
    data = bytearray(old.read_bytes())
    data[data.index(maps[-1]["trace_id"])] ^= 0x01  # inside the last record's trace id
    old.write_bytes(bytes(data))
    got, _ = _read(old)
    assert len(got) == 20 and got != maps


def test_upgrade_rewrites_a_version_1_file_with_checksums(tmp_path: Path) -> None:
    maps = random_maps(40)
    old = write_plain(tmp_path / "old.msgpack", maps)
    for name in ("new.msgpack", "new.msgpack.zst"):
        new = tmp_path / name
        result = CliRunner().invoke(cli, ["traces", "upgrade", str(old), "-o", str(new)])
        assert result.exit_code == 0, result.output
        assert "wrote 40 records" in result.stderr and "version 1 -> 2" in result.stderr
        assert stat.S_IMODE(os.stat(new).st_mode) == 0o600
        got, reader = _read(new)
        assert got == maps and reader.reports[0].checked
        header = reader.headers[0]
        assert header["version"] == 2 and header["upgraded_from"] == 1
        assert header["source"] == HEADER["source"]
        data = bytearray(new.read_bytes())
        data[len(data) // 2] ^= 0x10
        new.write_bytes(bytes(data))
        with pytest.raises(ArchiveError):
            _read(new)
    same = CliRunner().invoke(cli, ["traces", "upgrade", str(old), "-o", str(old)])
    assert same.exit_code == 2 and old.read_bytes()[:1] == b"\x84"


def test_upgrade_of_a_damaged_file_writes_nothing_unless_told_to_skip(tmp_path: Path) -> None:
    maps = random_maps(20)
    old = write_plain(tmp_path / "old.msgpack", maps)
    data = bytearray(old.read_bytes())
    data[data.index(msgpack.packb(maps[5]))] = 0xC1  # a byte msgpack never uses
    old.write_bytes(bytes(data))
    new = tmp_path / "new.msgpack"
    result = CliRunner().invoke(cli, ["traces", "upgrade", str(old), "-o", str(new)])
    assert one_verdict(result, "upgrade") is not None and not new.exists()
    result = CliRunner().invoke(
        cli, ["traces", "upgrade", "--skip-corrupt", str(old), "-o", str(new)]
    )
    assert result.exit_code == 0 and "warning:" in result.stderr
    got, _ = _read(new)
    assert [m for m in maps if m in got] == got and len(got) < 20


@pytest.mark.parametrize("checked", [False, True])
def test_a_record_with_a_key_twice_is_damage(tmp_path: Path, checked: bool) -> None:
    maps = random_maps(10)
    twice = msgpack.packb(maps[4])
    n = len(maps[4])
    # The same map with its first key repeated at the end: one more entry declared.
    assert n < 15 and twice[0] == 0x80 | n
    doubled = bytes([0x80 | n + 1]) + twice[1:] + msgpack.packb("start_ns")
    doubled += msgpack.packb(maps[4]["start_ns"] + 1)
    if checked:
        body = [msgpack.packb(m) for m in maps]
        body[4] = doubled
        path = tmp_path / "a.msgpack"
        head = msgpack.packb({**HEADER, "version": 2})
        batch = b"".join(body)
        marker = b"\xc7\x14\x62" + len(batch).to_bytes(4, "big") + (10).to_bytes(4, "big")
        marker += _digest(batch)
        path.write_bytes(head + b"\xd7\x68" + _digest(head) + marker + _digest(marker)[4:] + batch)
    else:
        path = tmp_path / "a.msgpack"
        path.write_bytes(
            msgpack.packb(HEADER)
            + b"".join(msgpack.packb(m) for m in maps[:4])
            + doubled
            + b"".join(msgpack.packb(m) for m in maps[5:])
        )
    with pytest.raises(ArchiveCorrupt, match="record 5: a key appears twice"):
        _read(path)
    with pytest.raises(ArchiveCorrupt, match="a key appears twice"):
        load_columns([path], ["duration_ns"])
    got, reader = _read(path, skip_corrupt=True)
    assert got == maps[:4] + maps[5:]
    assert any("skipped 1 damaged record" in w for w in reader.warnings())


def test_a_header_with_a_key_twice_is_a_damaged_header(tmp_path: Path) -> None:
    head = msgpack.packb(HEADER)
    assert head[0] == 0x84
    doubled = b"\x85" + head[1:] + msgpack.packb("source") + msgpack.packb("other")
    path = tmp_path / "a.msgpack"
    path.write_bytes(doubled + msgpack.packb(random_maps(1)[0]))
    with pytest.raises(ArchiveError, match="damaged header \\(a key appears twice\\)"):
        _read(path)
