"""Torn tails, damage in the middle, and inputs that are not archives at all."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import msgpack
import pytest
import zstandard
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.errors import ArchiveCorrupt
from tailreplay.traces.archive.batch_writer import write_archive
from tailreplay.traces.archive.checked_read import CheckedChunks
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.scan import FileScan
from tailreplay.traces.archive.zstd_read import ChunkStream
from tests.helpers import HEADER, random_maps, write_plain


def _stats(*args: str) -> tuple[int, dict | None, str]:
    result = CliRunner().invoke(cli, ["traces", "stats", "--json", *args])
    data = json.loads(result.stdout) if result.exit_code == 0 else None
    return result.exit_code, data, result.stderr


def test_truncation_at_every_offset_is_a_torn_tail(tmp_path: Path) -> None:
    maps = random_maps(12)
    full = write_plain(tmp_path / "full.msgpack", maps).read_bytes()
    header_len = len(msgpack.packb(HEADER))
    # Byte offsets where each record ends: a cut exactly there is a clean end.
    ends = [header_len]
    for m in maps:
        ends.append(ends[-1] + len(msgpack.packb(m)))
    cut = tmp_path / "cut.msgpack"
    for offset in range(header_len, len(full)):
        cut.write_bytes(full[:offset])
        code, data, err = _stats(str(cut))
        assert code == 0, (offset, err)
        complete = sum(1 for e in ends[1:] if e <= offset)
        assert data is not None and data["records"] == complete, offset
        if offset in ends:
            assert "torn" not in err
        else:
            assert f"torn final record at byte offset {ends[complete]}" in err, offset
        assert "Traceback" not in err


@pytest.mark.parametrize("compress", [False, True])
def test_a_tail_the_writer_finished_after_the_read_is_still_being_written(
    tmp_path: Path, compress: bool
) -> None:
    """A capture read while the proxy writes it: the read ends inside a record the
    writer completes a moment later. That is a file still being written, not a torn
    one; a compressed file's offsets cannot tell, so it stays "torn"."""
    maps = random_maps(12)
    data = msgpack.packb(HEADER) + b"".join(msgpack.packb(m) for m in maps)
    path = tmp_path / ("a.msgpack.zst" if compress else "a.msgpack")
    path.write_bytes(zstandard.ZstdCompressor().compress(data) if compress else data)
    seen = data[:-5]  # what the file held at the scan's last read
    reader = ArchiveReader([path], order="file")
    scan = FileScan(path, reader.reports[0], skip_corrupt=False)
    # The writer's last bytes land later.
    scan.chunks = CheckedChunks(ChunkStream(io.BytesIO(seen), 1 << 20), 1 << 20)
    assert len(list(scan.records())) == 11
    (line,) = reader.reports[0].warnings()
    at = len(data) - len(msgpack.packb(maps[-1]))
    if compress:
        assert line == f"{path}: torn final record at byte offset {at} ignored " + (
            "(the writer was interrupted); 11 complete records read"
        )
    else:
        assert line == (
            f"{path}: still being written: 11 complete records read; the record at "
            f"byte offset {at} was not whole yet"
        )


def test_zero_filled_tail_is_a_torn_tail(tmp_path: Path) -> None:
    path = write_plain(tmp_path / "a.msgpack", random_maps(20))
    with open(path, "ab") as f:
        f.write(b"\0" * 5000)  # what a power loss leaves after delayed allocation
    code, data, err = _stats(str(path))
    assert code == 0 and data is not None and data["records"] == 20
    assert "torn final record" in err


def test_damage_in_the_middle_exits_3_naming_file_and_offset(tmp_path: Path) -> None:
    maps = random_maps(50)
    path = write_plain(tmp_path / "a.msgpack", maps)
    data = bytearray(path.read_bytes())
    header_len = len(msgpack.packb(HEADER))
    offset = header_len + sum(len(msgpack.packb(m)) for m in maps[:20])
    data[offset : offset + 6] = b"\xc1" * 6  # 0xc1 is never valid msgpack
    path.write_bytes(bytes(data))

    code, _, err = _stats(str(path))
    assert code == 3
    lines = [line for line in err.splitlines() if line]
    assert len(lines) == 1
    assert str(path) in lines[0] and f"offset {offset}" in lines[0]

    code, stats, err = _stats("--skip-corrupt", str(path))
    assert code == 0 and stats is not None
    # Record 20 is lost (its head was overwritten); everything after it is recovered.
    assert stats["records"] == 49
    skipped = len(msgpack.packb(maps[20]))
    assert f"skipped {skipped} corrupt bytes" in err


def test_corrupt_length_prefix_cannot_swallow_the_rest(tmp_path: Path) -> None:
    # A damaged bin32 length (here 60 MiB, under the limit) would make a naive
    # reader wait for data that never comes and call everything after a torn tail.
    maps = random_maps(40)
    path = write_plain(tmp_path / "a.msgpack", maps)
    data = bytearray(path.read_bytes())
    offset = len(msgpack.packb(HEADER)) + sum(len(msgpack.packb(m)) for m in maps[:10])
    data[offset : offset + 5] = b"\xc6\x03\xc0\x00\x00"
    path.write_bytes(bytes(data))
    reader = ArchiveReader([path])
    with pytest.raises(ArchiveCorrupt) as exc:
        list(reader)
    assert exc.value.offset == offset
    reader = ArchiveReader([path], skip_corrupt=True)
    assert len(list(reader)) == 39


def test_hostile_length_is_rejected_without_allocating(tmp_path: Path) -> None:
    path = tmp_path / "hostile.msgpack"
    # A header, then a record claiming a 4 GiB string.
    path.write_bytes(msgpack.packb(HEADER) + b"\x81\xdb\xff\xff\xff\xff")
    code, _, err = _stats(str(path))
    assert code in (0, 3)
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: None, "no such file"),
        # A folder of archives is read as its archives; one without any is an error
        # (inspect, which shows one file, says it is no file).
        (lambda p: p.mkdir(), "is a directory|a folder with no archive in it"),
        # Never opened (a FIFO without a writer would block the open).
        (lambda p: os.mkfifo(p), "not a regular file (a pipe or a device)"),
        (lambda p: p.write_text("TIMESTAMP,ContextTokens\n"), "not a tailreplay archive"),
        (lambda p: p.write_bytes(b"\x85\xa6for"), "not a tailreplay archive (truncated header)"),
        (lambda p: p.write_bytes(msgpack.packb({"format": "other"})), "not a tailreplay archive"),
        (
            lambda p: p.write_bytes(msgpack.packb({**HEADER, "version": 99})),
            "archive format version 99 is newer",
        ),
    ],
    ids=["missing", "directory", "fifo", "csv", "torn-header", "foreign-msgpack", "newer-version"],
)
def test_bad_input_one_line_exit_3(tmp_path: Path, setup, message: str) -> None:
    path = tmp_path / "in.msgpack"
    setup(path)
    for command in (["stats"], ["inspect"], ["merge", "-o", str(tmp_path / "o.msgpack")]):
        result = CliRunner().invoke(cli, ["traces", *command, str(path)])
        assert result.exit_code == 3, (command, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and any(m in lines[0] for m in message.split("|")), lines


@pytest.mark.parametrize(
    "content",
    [b"", b"\0" * 3_000_000, zstandard.ZstdCompressor().compress(b"")],
    ids=["0-byte", "zero-filled", "empty-zstd"],
)
@pytest.mark.parametrize("skip", [[], ["--skip-corrupt"]])
def test_an_empty_file_in_a_capture_set_is_skipped_with_a_warning(
    tmp_path: Path, content: bytes, skip: list[str]
) -> None:
    # What a full disk leaves behind: a file created, nothing (or only zeros) written.
    maps = random_maps(30)
    good = tmp_path / "a.msgpack"
    write_archive(good, HEADER, maps)  # the capture beside it, as the proxy writes one
    empty = tmp_path / "b.msgpack"
    empty.write_bytes(content)
    code, data, err = _stats(*skip, str(good), str(empty))
    assert code == 0, err
    assert data is not None and data["records"] == 30
    assert err.strip().splitlines() == [
        f"warning: {empty}: empty file skipped (no header, no records)"
    ]
    out = tmp_path / "m.msgpack"
    result = CliRunner().invoke(
        cli, ["traces", "merge", *skip, "-o", str(out), str(empty), str(good)]
    )
    assert result.exit_code == 0, result.stderr
    assert "empty file skipped" in result.stderr
    assert list(ArchiveReader([out]).iter_maps()) == maps


def test_truncated_zstd_archive_reads_what_was_flushed(tmp_path: Path) -> None:
    maps = random_maps(3000)
    plain = write_plain(tmp_path / "p.msgpack", maps).read_bytes()
    compressed = zstandard.ZstdCompressor().compress(plain)
    path = tmp_path / "a.msgpack.zst"
    path.write_bytes(compressed[: len(compressed) * 2 // 3])
    reader = ArchiveReader([path])
    got = list(reader.iter_maps())
    assert 0 < len(got) < 3000
    assert got == maps[: len(got)]
