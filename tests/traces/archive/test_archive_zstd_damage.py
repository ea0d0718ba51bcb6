"""Damaged ``.msgpack.zst`` archives: read frame by frame, every record before the
damage kept, damage reported as for plain files, bombs stopped as damage.

The files here are laid out as the writer lays them out: frames that each start a
record, a zstd block at every flush (here: every ``BLOCK`` records).
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zstandard
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.traces.archive.checksums import (
    BATCH,
    BATCH_BYTES,
    FRAME_CHECK_SIZE,
    HEADER_CHECK,
    MARKER_SIZE,
)
from tailreplay.traces.archive.reader import ArchiveReader, open_chunks
from tailreplay.traces.archive.writer import ArchiveWriter
from tests.helpers import HEADER, random_maps, run_measured

BLOCK = 40  # records per zstd block (one flush)
FRAME = 600  # records per zstd frame


class Layout:
    """A compressed archive and where its pieces lie: ``blocks`` holds one
    (compressed start, compressed end, records before it, decompressed start) per
    block of records, in file order; ``frames`` the compressed start of each frame."""

    def __init__(self, maps: list[dict[str, Any]]) -> None:
        self.maps = maps
        self.header_len = len(msgpack.packb(HEADER))
        self.plain = msgpack.packb(HEADER) + b"".join(msgpack.packb(m) for m in maps)
        self.ends = [self.header_len]  # decompressed offset where each record ends
        for m in maps:
            self.ends.append(self.ends[-1] + len(msgpack.packb(m)))
        out = io.BytesIO()
        self.blocks: list[tuple[int, int, int, int]] = []
        self.frames: list[int] = [0]
        z = zstandard.ZstdCompressor(level=3).stream_writer(out, closefd=False)
        z.write(msgpack.packb(HEADER))
        z.flush(zstandard.FLUSH_BLOCK)
        for i in range(0, len(maps), BLOCK):
            start = out.tell()
            z.write(b"".join(msgpack.packb(m) for m in maps[i : i + BLOCK]))
            end_frame = (i + BLOCK) % FRAME == 0 or i + BLOCK >= len(maps)
            z.flush(zstandard.FLUSH_FRAME if end_frame else zstandard.FLUSH_BLOCK)
            self.blocks.append((start, out.tell(), i, self.ends[i]))
            if end_frame and i + BLOCK < len(maps):
                self.frames.append(out.tell())
        self.data = out.getvalue()


def _stats(path: Path, *skip: str) -> tuple[int, dict[str, Any] | None, str]:
    result = CliRunner().invoke(cli, ["traces", "stats", "--json", *skip, str(path)])
    assert "Traceback" not in result.output, result.output
    data = json.loads(result.stdout) if result.exit_code == 0 else None
    return result.exit_code, data, result.stderr


def _maps(path: Path, skip: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    reader = ArchiveReader([path], order="file", skip_corrupt=skip)
    return list(reader.iter_maps()), reader.warnings()


@pytest.fixture(scope="module")
def layout() -> Layout:
    return Layout(random_maps(1800, seed=11))


def _damaged_block(layout: Layout, index: int) -> bytes:
    """The file with one byte of block ``index``'s header changed: a reserved block type."""
    start = layout.blocks[index][0]
    # The flushed block starts where the previous flush ended: its 3-byte header first.
    out = bytearray(layout.data)
    out[start] |= 0b110
    return bytes(out)


def test_a_flipped_byte_mid_file_is_damage_at_the_first_record_it_costs(
    tmp_path: Path, layout: Layout
) -> None:
    index = len(layout.blocks) // 2 + 1  # inside the second frame, not at its start
    path = tmp_path / "a.msgpack.zst"
    path.write_bytes(_damaged_block(layout, index))
    _, _, lost, at = layout.blocks[index]
    code, _, err = _stats(path)
    assert code == 3, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"corrupt archive at byte offset {at} (" in lines[0], lines
    # --skip-corrupt: every record before the damaged block, then the next frame on.
    got, warnings = _maps(path, skip=True)
    next_frame = (lost // FRAME + 1) * FRAME
    assert got == layout.maps[:lost] + layout.maps[next_frame:]
    skipped = [w for w in warnings if "skipped damaged compressed data" in w]
    assert len(skipped) == 1 and f"byte offset {at}:" in skipped[0], warnings
    code, data, err = _stats(path, "--skip-corrupt")
    assert code == 0 and data is not None and data["records"] == len(got), err


def test_a_flipped_byte_in_the_first_frame_goes_on_at_the_second(
    tmp_path: Path, layout: Layout
) -> None:
    path = tmp_path / "a.msgpack.zst"
    path.write_bytes(_damaged_block(layout, 3))
    got, _ = _maps(path, skip=True)
    assert got == layout.maps[: 3 * BLOCK] + layout.maps[FRAME:]


def test_the_last_20_bytes_cut_is_a_torn_tail(tmp_path: Path, layout: Layout) -> None:
    path = tmp_path / "a.msgpack.zst"
    path.write_bytes(layout.data[:-20])
    kept = layout.blocks[-1][2]  # the last block is cut: the records before it are whole
    got, warnings = _maps(path)
    assert got == layout.maps[:kept]
    assert warnings == [
        f"{path}: torn final record at byte offset {layout.ends[kept]} ignored "
        f"(the writer was interrupted); {kept} complete records read"
    ]
    code, data, err = _stats(path)
    assert code == 0 and data is not None and data["records"] == kept
    assert "torn final record" in err


def test_bytes_appended_after_the_last_frame_are_refused(tmp_path: Path, layout: Layout) -> None:
    path = tmp_path / "a.msgpack.zst"
    path.write_bytes(layout.data + bytes(range(7, 71)))
    code, _, err = _stats(path)
    assert code == 3 and "are not compressed: an archive is compressed whole" in err, err
    got, warnings = _maps(path, skip=True)
    assert got == layout.maps
    assert any("skipped damaged compressed data at 1 place(s)" in w for w in warnings), warnings


def test_plain_records_after_a_zstd_stream_are_refused_in_one_line(tmp_path: Path) -> None:
    maps = random_maps(30)
    path = tmp_path / "a.msgpack.zst"
    with ArchiveWriter(path, header=HEADER) as w:
        for m in maps[:20]:
            w.append(m)
    with open(path, "ab") as f:  # a writer that forgot to compress the rest
        for m in maps[20:]:
            f.write(msgpack.packb(m))
    code, _, err = _stats(path)
    assert code == 3, err
    (line,) = [x for x in err.splitlines() if x.startswith("Error: ")]
    assert "after the last zstd frame" in line and "are not compressed" in line, err


def test_zeros_after_the_last_frame_are_a_torn_tail(tmp_path: Path, layout: Layout) -> None:
    path = tmp_path / "a.msgpack.zst"
    path.write_bytes(layout.data + bytes(4096))  # what a power loss leaves
    got, warnings = _maps(path)
    assert got == layout.maps
    assert len(warnings) == 1 and "torn final record" in warnings[0], warnings


def test_garbage_between_frames_is_damage_and_skip_corrupt_goes_on(
    tmp_path: Path, layout: Layout
) -> None:
    cut = layout.frames[1]
    path = tmp_path / "a.msgpack.zst"
    path.write_bytes(layout.data[:cut] + b"\x01garbage!" * 7 + layout.data[cut:])
    code, _, err = _stats(path)
    assert code == 3 and f"corrupt archive at byte offset {layout.ends[FRAME]}" in err, err
    got, _ = _maps(path, skip=True)
    assert got == layout.maps


def test_skippable_frames_are_no_damage(tmp_path: Path, layout: Layout) -> None:
    skippable = (0x184D2A53).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"hello"
    cut = layout.frames[1]
    path = tmp_path / "a.msgpack.zst"
    path.write_bytes(skippable + layout.data[:cut] + skippable + layout.data[cut:])
    got, warnings = _maps(path)
    assert got == layout.maps and warnings == []


def test_a_frame_asking_for_a_huge_window_is_damage(tmp_path: Path, layout: Layout) -> None:
    # A frame header declaring a 2 GiB window (exponent 21): a decoder would allocate it.
    frame = b"\x28\xb5\x2f\xfd" + b"\x00" + bytes([21 << 3]) + b"\x01\x00\x00"  # raw, empty, last
    path = tmp_path / "a.msgpack.zst"
    path.write_bytes(layout.data[: layout.frames[1]] + frame)
    code, _, err = _stats(path)
    assert code == 3 and "window" in err, err


def _tiny_record_bomb() -> bytes:
    """~80 KB of zstd that decompresses to gigabytes of valid 11-byte records."""
    z = zstandard.ZstdCompressor(level=3)
    frame = z.compress(msgpack.packb({"start_ns": 1}) * (1 << 20))  # 11 MiB in ~1 KB
    return z.compress(msgpack.packb(HEADER)) + frame * 75


def _zero_tail_bomb(layout: Layout) -> bytes:
    """The archive, then a frame of 4 GiB of zero bytes (RLE blocks, 4 bytes each)."""
    rle = ((1 << 1) | ((128 << 10) << 3)).to_bytes(3, "little") + b"\x00"  # type 1: RLE
    last = ((1 << 1) | ((128 << 10) << 3) | 1).to_bytes(3, "little") + b"\x00"
    frame = b"\x28\xb5\x2f\xfd" + b"\x00" + bytes([(17 - 10) << 3])
    return layout.data + frame + rle * ((4 << 30 >> 17) - 1) + last


# Every command that reads archives to their end (``traces inspect`` reads the first
# records only, and a bomb lies past them).
COMMANDS = {
    "stats": ["traces", "stats"],
    "merge": ["traces", "merge", "-o", "{tmp}/merged.msgpack"],
    "slice": ["traces", "slice", "-o", "{tmp}/sliced.msgpack"],
    "peak": ["traces", "peak", "--window", "10s", "-o", "{tmp}/peak.msgpack"],
    "export-jsonl": ["traces", "export", "jsonl", "-o", "{tmp}/e.jsonl"],
    "export-mooncake": ["traces", "export", "mooncake", "-o", "{tmp}/m.jsonl"],
    "fit": ["traces", "fit", "-o", "{tmp}/model.json"],
    "report": ["report", "--replay-only"],
    "replay": ["replay", "--dry-run", "--out", "{tmp}/dry.msgpack"],
}


@pytest.mark.parametrize("bomb", ["tiny-records", "zero-tail"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_compression_bomb_is_damage_quickly_in_bounded_memory(
    tmp_path: Path, layout: Layout, bomb: str, command: str
) -> None:
    path = tmp_path / "bomb.msgpack.zst"
    path.write_bytes(_tiny_record_bomb() if bomb == "tiny-records" else _zero_tail_bomb(layout))
    assert path.stat().st_size < 300_000
    args = [a.replace("{tmp}", str(tmp_path)) for a in COMMANDS[command]] + [str(path)]
    code, err, rss = run_measured(args, tmp_path, timeout_s=30)
    lines = err.strip().splitlines()
    assert code == 3 and len(lines) == 1 and "Traceback" not in err, err
    assert re.search(r"corrupt archive at byte offset \d+ .*compress", lines[0]), lines
    assert rss < 512, rss


def test_a_bomb_is_skipped_with_skip_corrupt(tmp_path: Path, layout: Layout) -> None:
    path = tmp_path / "bomb.msgpack.zst"
    path.write_bytes(_zero_tail_bomb(layout))
    got, warnings = _maps(path, skip=True)
    assert got == layout.maps
    assert any("skipped damaged compressed data" in w for w in warnings), warnings


def _frames(data: bytes) -> list[tuple[int, bytes]]:
    """(compressed offset, decompressed bytes) of each frame of a well-formed file."""
    out, at = [], 0
    while at < len(data):
        decoder = zstandard.ZstdDecompressor().decompressobj()
        content = decoder.decompress(data[at:])
        out.append((at, content))
        at = len(data) - len(decoder.unused_data)
    return out


def _last_block(data: bytes, frame: int = 0) -> int:
    """Where the last block of the frame at ``frame`` starts (RFC 8878's layout)."""
    descriptor = data[frame + 4]
    single = descriptor >> 5 & 1
    at = frame + 5 + (1 - single) + (0, 1, 2, 4)[descriptor & 3]
    at += (single, 2, 4, 8)[descriptor >> 6]
    while True:
        head = int.from_bytes(data[at : at + 3], "little")
        if head & 1:
            return at
        at += 3 + (1 if head >> 1 & 3 == 1 else head >> 3)


def test_the_writer_writes_each_batch_as_a_frame_with_its_checksums(tmp_path: Path) -> None:
    maps = random_maps(90_000, seed=5)  # about 11 MB packed: more than one batch
    path = tmp_path / "w.msgpack.zst"
    with ArchiveWriter(path, header=HEADER, queue_size=len(maps) + 1, check=False) as w:
        for m in maps:
            w.append(m)
    data = path.read_bytes()
    # A frame check (a skippable frame) before every frame.
    frames = [(at, content) for at, content in _frames(data) if data[at] != 0x5B]
    assert [at for at, _ in frames] == [at + FRAME_CHECK_SIZE for at, _ in _frames(data)[::2]]
    assert len(frames) >= 3
    counts = []
    for i, (at, content) in enumerate(frames):
        descriptor = data[at + 4]
        assert descriptor & 0x04, "each frame carries zstd's content checksum"
        assert len(content) <= BATCH_BYTES + MARKER_SIZE
        objects = list(msgpack.Unpacker(io.BytesIO(content), raw=False))  # whole objects only
        check, records = objects[1 if i == 0 else 0], objects[2 if i == 0 else 1 :]
        assert isinstance(check, msgpack.ExtType), "the header check, then a batch's marker"
        assert check.code == (HEADER_CHECK if i == 0 else BATCH)
        assert all(isinstance(o, dict) and "start_ns" in o for o in records)
        counts.append(len(records))
    assert counts[0] == 0 and sum(counts) == len(maps)
    # Damage in the second frame (the first batch) costs that batch only.
    damaged = bytearray(data)
    damaged[_last_block(data, frames[1][0])] |= 0b110  # its header: a reserved block type
    path.write_bytes(bytes(damaged))
    got, warnings = _maps(path, skip=True)
    assert got == maps[counts[1] :]
    assert any("compressed data" in w for w in warnings), warnings


def test_the_budget_a_file_may_decompress_to_is_a_setting(
    tmp_path: Path, layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.msgpack.zst"
    path.write_bytes(layout.data)
    monkeypatch.setenv("TAILREPLAY_ZSTD_BUDGET", "100KiB")
    code, _, err = _stats(path)
    assert code == 3 and "TAILREPLAY_ZSTD_BUDGET" in err, err
    monkeypatch.setenv("TAILREPLAY_ZSTD_BUDGET", "lots")
    code, _, err = _stats(path)
    assert code == 2 and "TAILREPLAY_ZSTD_BUDGET='lots': not a size" in err, err


def test_a_checksum_that_does_not_match_is_damage(tmp_path: Path) -> None:
    maps = random_maps(50)
    plain = msgpack.packb(HEADER) + b"".join(msgpack.packb(m) for m in maps)
    data = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(plain))
    data[-1] ^= 0x01  # the frame's checksum
    path = tmp_path / "a.msgpack.zst"
    path.write_bytes(bytes(data))
    code, _, err = _stats(path)
    assert code == 3 and "checksum" in err, err
    got, warnings = _maps(path, skip=True)
    assert got == maps and "checksum" in warnings[0]


def test_a_stream_past_its_end_stays_at_its_end(tmp_path: Path, layout: Layout) -> None:
    for name, data in (("a.msgpack", layout.plain), ("a.msgpack.zst", layout.data)):
        path = tmp_path / name
        path.write_bytes(data)
        stream = open_chunks(path)
        assert b"".join(stream) == layout.plain
        assert next(stream, None) is None and next(stream, None) is None


def test_files_read_one_after_another_are_open_one_at_a_time(tmp_path: Path) -> None:
    paths = []
    for i in range(60):
        path = tmp_path / f"{i}.msgpack{'.zst' if i % 2 else ''}"
        plain = msgpack.packb(HEADER) + b"".join(map(msgpack.packb, random_maps(2, seed=i)))
        path.write_bytes(zstandard.ZstdCompressor().compress(plain) if i % 2 else plain)
        paths.append(path)
    before = len(os.listdir("/proc/self/fd"))
    maps = ArchiveReader(paths, order="file").iter_maps()
    next(maps)
    assert len(os.listdir("/proc/self/fd")) <= before + 2
    assert sum(1 for _ in maps) == 119
