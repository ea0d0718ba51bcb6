"""Report speed and memory: ``tailreplay report`` on a recorded and a replayed archive.

Each case runs in a fresh process, several times; the table shows the median wall
time, the peak RSS, and the ratio against the comparison run in the same
invocation: a bare ``msgpack`` loop that reads both archives and takes numpy
percentiles of their latencies — the floor of any report over these files.
Run: ``.venv/bin/python bench/report.py [--records 500000] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack

T0 = 1_700_000_000 * 10**9
GAPS = 20  # streamed chunks per request

BARE = """
import sys, msgpack, numpy as np
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        unpacker = msgpack.Unpacker(f, raw=False)
        next(unpacker)
        d = np.array([m.get("duration_ns", -1) for m in unpacker])
    np.percentile(d[d >= 0], [50, 95, 99, 99.9])
"""

REPORT = """
import sys
from pathlib import Path
from tailreplay.report.write import ReportOptions, write_report
out = Path(sys.argv[3])
write_report(ReportOptions(replayed=[Path(sys.argv[2])], recorded=[Path(sys.argv[1])],
                           json_out=out / "r.json", html_out=out / "r.html"))
"""


def write_pair(directory: Path, n: int) -> tuple[Path, Path]:
    rng = random.Random(1)
    recorded, replayed = directory / "recorded.msgpack", directory / "replayed.msgpack"
    with recorded.open("wb") as rec, replayed.open("wb") as rep:
        rec.write(msgpack.packb({"format": "tailreplay", "version": 1, "source": "proxy"}))
        rep.write(msgpack.packb({"format": "tailreplay", "version": 1, "source": "replay"}))
        t = T0
        for _ in range(n):
            t += rng.randint(0, 2 * 10**7)
            trace, span = rng.randbytes(16), rng.randbytes(8)
            duration = rng.randint(10**8, 10**10)
            gaps = [rng.randint(1000, 60000) for _ in range(GAPS)]
            common = {"method": "POST", "path": "/v1/chat/completions", "status": 200,
                      "model": "m", "stream": True, "input_tokens": rng.randint(10, 4000),
                      "output_tokens": GAPS + 1}  # fmt: skip
            rec.write(msgpack.packb({"start_ns": t, "trace_id": trace, "span_id": span,
                                     "duration_ns": duration, "ttfb_ns": duration // 5,
                                     "chunk_gaps_us": gaps, **common}))  # fmt: skip
            rep.write(msgpack.packb({"start_ns": t + 10**9, "trace_id": trace,
                                     "span_id": rng.randbytes(8), "orig_trace_id": trace,
                                     "orig_span_id": span, "duration_ns": duration * 2,
                                     "ttfb_ns": duration // 4, "chunk_gaps_us": gaps,
                                     "lag_ns": rng.randint(10**4, 10**6), **common}))  # fmt: skip
    return recorded, replayed


def run_case(code: str, args: list[str]) -> tuple[float, float]:
    """(seconds, peak RSS in MiB) of one run in a fresh interpreter."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *args], check=True)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of children is the largest child so far: meaningful when it grows.
    return seconds, max(peak, before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        recorded, replayed = write_pair(directory, args.records)
        size = (recorded.stat().st_size + replayed.stat().st_size) / 2**20
        files = [str(recorded), str(replayed)]
        rows = {}
        # The bare case first: RUSAGE_CHILDREN keeps the largest child's peak.
        for name, code, extra in (("bare msgpack + numpy", BARE, []),
                                  ("tailreplay report", REPORT, [tmp])):  # fmt: skip
            runs = [run_case(code, files + extra) for _ in range(args.runs)]
            rows[name] = (statistics.median(r[0] for r in runs), max(r[1] for r in runs))
    base = rows["bare msgpack + numpy"][0]
    print(f"{args.records:,} records a side ({size:,.0f} MiB of archives, {GAPS} chunk gaps "
          f"a request), median of {args.runs} runs")  # fmt: skip
    print("| case | seconds | records/s (both sides) | peak RSS MiB | vs bare |")
    print("|---|--:|--:|--:|--:|")
    for name, (seconds, rss) in rows.items():
        rate = 2 * args.records / seconds
        print(f"| {name} | {seconds:.2f} | {rate:,.0f} | {rss:,.0f} | {seconds / base:.2f} |")


if __name__ == "__main__":
    main()
