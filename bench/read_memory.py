"""Peak memory of ``replay --dry-run`` on archives built to test the read budget.

Two cases from the archive format's memory contract (docs/archive-format.md,
"Memory"): 4 million small records inside one re-ordering window, and records
carrying 60 MB request bodies. Each is written zstd-compressed to a temporary
folder, then ``tailreplay replay --dry-run`` runs in its own process; its peak RSS
is VmHWM at exit (getrusage's ru_maxrss would also count the memory of the process
it was forked from). Prints a Markdown table; ``--check`` exits 1 when a case
reaches 500 MB. Run: ``make fuzz`` or ``.venv/bin/python bench/read_memory.py``.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack
import zstandard

LIMIT_MB = 500
T0 = 1_700_000_000 * 10**9
HEADER = {"format": "tailreplay", "version": 1, "created_ns": T0, "source": "proxy",
          "capture": {"timeout_s": 600}}  # fmt: skip

_MEASURED = """
import atexit, sys
from pathlib import Path
out = Path(sys.argv.pop(1))
def peak():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            out.write_text(line.split()[1])
atexit.register(peak)
from tailreplay.cli import main
main()
"""


def small_records(path: Path, n: int) -> None:
    """``n`` records 1 us apart, each lasting 100 ms: all inside one window."""
    pack = msgpack.Packer().pack
    with open(path, "wb") as f, zstandard.ZstdCompressor(level=1).stream_writer(f) as z:
        z.write(pack(HEADER))
        for i in range(n):
            record = {"start_ns": T0 + i * 1000, "duration_ns": 10**8, "status": 200,
                      "method": "POST", "path": "/v1/chat/completions", "model": "m",
                      "input_tokens": 10 + i % 4000, "output_tokens": 5 + i % 700,
                      "trace_id": i.to_bytes(16, "big"),
                      "span_id": i.to_bytes(8, "big")}  # fmt: skip
            z.write(pack(record))


def big_records(path: Path, n: int, body_mb: int) -> None:
    """``n`` records starting together, each with a ``body_mb`` MB request body (one
    random byte in 256: it compresses about 70x, where zeros would be a bomb)."""
    body = bytearray(body_mb << 20)
    body[::256] = random.Random(1).randbytes(len(body[::256]))
    pack = msgpack.Packer().pack
    with open(path, "wb") as f, zstandard.ZstdCompressor(level=1).stream_writer(f) as z:
        z.write(pack(HEADER))
        for i in range(n):
            z.write(pack({"start_ns": T0 + i, "duration_ns": 10**9, "status": 200,
                          "input_tokens": 10, "output_tokens": 5, "req_body": body}))  # fmt: skip


def dry_run(path: Path, tmp: Path) -> tuple[float, float, str]:
    """(peak RSS in MB, seconds, the last line it printed) of a dry run of ``path``."""
    peak, out = tmp / "peak_kb", tmp / "dry.msgpack"
    peak.unlink(missing_ok=True)
    out.unlink(missing_ok=True)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED, str(peak), "replay", "--dry-run", "--out", str(out),
         str(path)],
        capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"dry run of {path} failed ({done.returncode}): {done.stderr.strip()}")
    lines = (done.stdout + done.stderr).strip().splitlines()
    return (
        int(peak.read_text()) / 1024,
        seconds,
        next((line for line in lines if line.startswith("dry run:")), ""),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", type=int, default=4_000_000, help="records in one window")
    parser.add_argument("--big", type=int, default=20, help="records with a big body")
    parser.add_argument("--body-mb", type=int, default=60)
    parser.add_argument("--check", action="store_true", help=f"exit 1 at {LIMIT_MB} MB or more")
    args = parser.parse_args()
    budget = os.environ.get("TAILREPLAY_READ_BUDGET", "256MiB (default)")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cases = [
            (f"{args.small:,} small records, one window", small_records, (args.small,)),
            (f"{args.big} records of {args.body_mb} MB", big_records, (args.big, args.body_mb)),
        ]
        for name, make, params in cases:
            path = tmp / "case.msgpack.zst"
            make(path, *params)  # type: ignore[operator]
            size = path.stat().st_size
            rss, seconds, said = dry_run(path, tmp)
            rows.append((name, size, rss, seconds, said))
            path.unlink()
    print(f"replay --dry-run, read budget {budget}; peak RSS of the process (VmHWM)\n")
    print("| case | archive (zstd) | peak RSS | time | output |")
    print("|---|---:|---:|---:|---|")
    for name, size, rss, seconds, said in rows:
        print(f"| {name} | {size / 1e6:,.1f} MB | {rss:,.0f} MB | {seconds:,.0f} s | {said} |")
    if args.check and any(rss >= LIMIT_MB for _, _, rss, _, _ in rows):
        raise SystemExit(f"a case reached {LIMIT_MB} MB")


if __name__ == "__main__":
    main()
