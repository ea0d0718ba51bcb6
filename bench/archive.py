"""Archive throughput: records/s written and read, and bytes per record.

Each case runs several times; the table shows the median and the ratio against a
comparison run in the same invocation — a bare ``msgpack`` loop doing the same
job with none of tailreplay's machinery (no background thread, no validation, no
re-ordering). Run: ``make bench`` or ``.venv/bin/python bench/archive.py``.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgpack
import zstandard

from tailreplay.traces.archive.columns import load_columns
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.reader import ArchiveReader
from tailreplay.traces.archive.record import Record
from tailreplay.traces.archive.writer import ArchiveWriter
from tailreplay.traces.results.stats import STATS_FIELDS, STATS_PRESENCE


def make_records(n: int, body: int) -> list[Record]:
    """Body-less records look like a proxy's capture of a non-streaming chat call."""
    rng = random.Random(1)
    t = 1_700_000_000 * 10**9
    out = []
    for _ in range(n):
        t += rng.randint(0, 10**8)
        out.append(
            Record(
                start_ns=t,
                trace_id=rng.randbytes(16),
                span_id=rng.randbytes(8),
                duration_ns=rng.randint(10**7, 10**10),
                ttfb_ns=rng.randint(10**6, 10**8),
                method="POST",
                path="/v1/chat/completions",
                status=200,
                model="llama-3-8b",
                stream=False,
                input_tokens=rng.randint(10, 4000),
                output_tokens=rng.randint(1, 800),
                tokens_source="usage",
                max_tokens=1024,
                bytes_in=rng.randint(100, 20000),
                bytes_out=rng.randint(100, 5000),
                req_body=rng.randbytes(body) if body else None,
            )
        )
    return out


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def write_ours(records: list[Record], path: Path) -> None:
    w = ArchiveWriter(path, header=make_header("bench"), queue_size=len(records) + 1)
    for r in records:
        w.append(r)
    w.close()
    assert w.stats.written == len(records), w.stats.dropped


def write_baseline(records: list[Record], path: Path) -> None:
    packb = msgpack.Packer().pack
    with open(path, "wb") as f:
        if path.suffix == ".zst":
            z = zstandard.ZstdCompressor(level=3).stream_writer(f)
            z.write(packb(make_header("bench")))
            for r in records:
                z.write(packb(r.to_map()))
            z.flush(zstandard.FLUSH_FRAME)
        else:
            f.write(packb(make_header("bench")))
            for r in records:
                f.write(packb(r.to_map()))


def read_records_ours(path: Path) -> int:
    return sum(1 for _ in ArchiveReader([path]))


def read_columns_ours(path: Path) -> int:
    return load_columns([path], STATS_FIELDS, presence_only=STATS_PRESENCE).n


def read_baseline(path: Path) -> int:
    with open(path, "rb") as f:
        src = zstandard.ZstdDecompressor().stream_reader(f) if path.suffix == ".zst" else f
        return sum(1 for _ in msgpack.Unpacker(src, raw=False)) - 1


def measure(
    label: str, records: list[Record], ours: Path, base: Path, runs: int
) -> list[tuple[str, str, float, float, float]]:
    """Rows for one case: write, read records, read columns; each against the baseline."""
    n = len(records)

    def median_s(fn: Callable[[], object]) -> float:
        return statistics.median(timed(fn) for _ in range(runs))

    write = median_s(lambda: write_ours(records, ours))
    write_base = median_s(lambda: write_baseline(records, base))
    size = os.path.getsize(ours) / n
    read_recs = median_s(lambda: read_records_ours(ours))
    read_cols = median_s(lambda: read_columns_ours(ours))
    read_base = median_s(lambda: read_baseline(base))
    return [
        (label, "write", n / write, write_base / write, size),
        (label, "read records", n / read_recs, read_base / read_recs, size),
        (label, "read columns", n / read_cols, read_base / read_cols, size),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for body in (0, 2048):
            records = make_records(args.records if body == 0 else args.records // 4, body)
            for compress in (False, True):
                suffix = ".msgpack.zst" if compress else ".msgpack"
                label = f"{'2 KB body' if body else 'no body'}, {'zstd' if compress else 'plain'}"
                ours, base = Path(tmp, "ours" + suffix), Path(tmp, "base" + suffix)
                rows += measure(label, records, ours, base, args.runs)

    print(f"records: {args.records:,} (with 2 KB bodies: {args.records // 4:,})")
    print(
        f"median of {args.runs} runs; ratio = bare msgpack loop's time / ours (>1: we are faster)"
    )
    print()
    print("| case | operation | records/s | ratio vs bare msgpack | bytes/record |")
    print("|---|---|---:|---:|---:|")
    for label, op, rate, ratio, size in rows:
        print(f"| {label} | {op} | {rate:,.0f} | {ratio:.2f} | {size:,.1f} |")


if __name__ == "__main__":
    main()
