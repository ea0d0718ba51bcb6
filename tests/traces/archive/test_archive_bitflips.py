"""A flipped bit anywhere in an archive tailreplay wrote is damage, never a changed record.

Small archives are written by the real writer (and one captured by the real proxy),
plain and compressed, in several flush batches each. For 1,200 random single-bit flips
of each, every read (records, and the column scanner behind ``traces stats``) either
stops with damage or gives exactly the records written; at least 99.9% of the flips
are reported as damage, and with ``--skip-corrupt`` every record read is one that was
written, in its place. A handful of flips go through the command line for its exit
code and its one line.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner

from tailreplay.cli import cli
from tailreplay.errors import ArchiveError
from tailreplay.traces.archive.columns import load_columns
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.writer import ArchiveWriter
from tests.helpers import one_verdict, random_maps
from tests.proxy_helpers import echo_upstream, proxy_to

FLIPS = 1_200
BATCHES = 5


def _write(path: Path, maps: list[dict[str, Any]]) -> bytes:
    """``maps`` written by the writer in ``BATCHES`` flushes; the file's bytes."""
    writer = ArchiveWriter(path, header=make_header("test"), flush_interval=0.0)
    per = -(-len(maps) // BATCHES)
    for i in range(0, len(maps), per):
        for m in maps[i : i + per]:
            writer.append(m)
        deadline = time.monotonic() + 5
        while writer.stats.written < min(i + per, len(maps)) and time.monotonic() < deadline:
            time.sleep(0.005)  # let this group go out as its own flush batch
    writer.close()
    return path.read_bytes()


def _read(path: Path, *, skip: bool = False) -> tuple[list[dict[str, Any]], str | None]:
    """The records a reader hands out, and its verdict: None (intact), "damage" (an
    error, or with ``skip`` a warning of damage skipped) or "torn" (a torn tail)."""
    got: list[dict[str, Any]] = []
    try:
        reader = ArchiveReader([path], order="file", shadows="keep", skip_corrupt=skip)
        got.extend(reader.iter_maps())
    except ArchiveError:
        return got, "damage"
    warnings = reader.warnings()
    if any("torn" not in w for w in warnings):
        return got, "damage"
    return got, "torn" if warnings else None


def _subsequence(got: list[dict[str, Any]], maps: list[dict[str, Any]]) -> bool:
    """Every record of ``got`` is one of ``maps``, in the order written."""
    it = iter(maps)
    return all(any(g == m for m in it) for g in got)


def _flip_all(data: bytes, maps: list[dict[str, Any]], path: Path, seed: int) -> None:
    rng = random.Random(seed)
    starts = sorted(m["start_ns"] for m in maps)
    missed = []
    for n in range(FLIPS):
        bit = rng.randrange(len(data) * 8)
        damaged = bytearray(data)
        damaged[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(damaged))
        got, verdict = _read(path)
        assert got == maps[: len(got)], f"bit {bit}: a changed record was read"
        if verdict is None:
            assert got == maps, f"bit {bit}: records lost without a word"
        if verdict != "damage":
            missed.append(bit)
        kept, _ = _read(path, skip=True)
        assert _subsequence(kept, maps), f"bit {bit}: --skip-corrupt read a changed record"
        if n % 4 == 0:  # the C column scanner (traces stats) on a quarter of them
            try:
                cols = load_columns([path], ["duration_ns", "status"])
            except ArchiveError:
                continue
            assert verdict != "damage", f"bit {bit}: the columns missed damage the reader saw"
            assert cols["start_ns"].tolist() == starts[: cols.n], f"bit {bit}: changed columns"
    assert len(missed) <= FLIPS // 1000, f"flips read as if intact: bits {missed}"


@pytest.mark.parametrize("suffix", [".msgpack", ".msgpack.zst"])
def test_a_flipped_bit_in_a_written_archive_is_damage(tmp_path: Path, suffix: str) -> None:
    maps = random_maps(200, seed=11)
    data = _write(tmp_path / f"a{suffix}", maps)
    assert _read(tmp_path / f"a{suffix}") == (maps, None)
    _flip_all(data, maps, tmp_path / f"flipped{suffix}", seed=len(suffix))


async def _capture(out: Path, compress: bool) -> None:
    async with echo_upstream() as up, proxy_to(up, out, compress=compress) as proxy:
        url = f"{proxy.url}/v1/chat/completions"
        async with aiohttp.ClientSession() as session:
            for i in range(12):
                body = {"model": "m", "messages": [{"role": "user", "content": f"hi {i}"}]}
                async with session.post(url, json=body) as r:
                    await r.read()
                if i % 3 == 2:
                    await asyncio.sleep(0.25)  # past the proxy's flush interval (0.1 s)


@pytest.mark.parametrize("compress", [False, True])
def test_a_flipped_bit_in_a_proxy_capture_is_damage(tmp_path: Path, compress: bool) -> None:
    out = tmp_path / "capture"
    asyncio.run(_capture(out, compress))
    (path,) = sorted(out.glob("*.msgpack*"))
    maps, damage = _read(path)
    assert damage is None and len(maps) == 12
    _flip_all(path.read_bytes(), maps, tmp_path / f"flipped{path.suffix}", seed=3 + compress)


@pytest.mark.parametrize("suffix", [".msgpack", ".msgpack.zst"])
def test_damage_is_one_line_and_exit_3_on_the_command_line(tmp_path: Path, suffix: str) -> None:
    maps = random_maps(40, seed=12)
    data = _write(tmp_path / f"a{suffix}", maps)
    rng = random.Random(5)
    path = tmp_path / f"flipped{suffix}"
    for _ in range(4):
        bit = rng.randrange(len(data) * 8)
        damaged = bytearray(data)
        damaged[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(damaged))
        for args in (["traces", "stats"], ["traces", "inspect", "-n", "100"]):
            result = CliRunner().invoke(cli, [*args, str(path)])
            line = one_verdict(result, f"{args} bit {bit}")
            assert result.exit_code == 3 and line is not None, (bit, result.output)
            skipped = CliRunner().invoke(cli, [*args, "--skip-corrupt", str(path)])
            assert one_verdict(skipped, f"{args} --skip-corrupt bit {bit}") is None
            assert "warning:" in skipped.stderr, (bit, skipped.stderr)
