"""Does the capacity search find what a brute-force sweep finds, in less time?

One recorded window (Poisson arrivals at ``--rate`` for ``--seconds``, prompts of
100-1,500 tokens, 10-60 output tokens, streamed) against the built-in simulator
(``fast`` profile, a fresh one per replay) with ``latency:p99<=1500ms``:

- **search**: ``tailreplay capacity`` (coarse replays of the window's first quarter
  to aim, full ones to decide, ``--precision 5%``);
- **sweep**: ``tailreplay capacity --sweep 0.5x``: full replays at 1x, 1.5x, 2x, ...
  until one fails.

Each is run ``--runs`` times, alternating; the table has each one's median wall
time, its capacity and bracket, and the search's time over the sweep's.

    .venv/bin/python bench/capacity.py --runs 3
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack

SLO = "latency:p99<=1500ms"


def archive(path: Path, rate: float, seconds: float) -> int:
    rng = random.Random(1)
    t, n = 0.0, 0
    t0 = 1_700_000_000 * 10**9
    with path.open("wb") as f:
        f.write(msgpack.packb({"format": "tailreplay", "version": 1, "source": "bench"}))
        while (t := t + rng.expovariate(rate)) < seconds:
            f.write(msgpack.packb({
                "start_ns": t0 + int(t * 1e9), "trace_id": rng.randbytes(16),
                "span_id": rng.randbytes(8), "method": "POST", "path": "/v1/chat/completions",
                "model": "m", "stream": True, "input_tokens": rng.randint(100, 1500),
                "output_tokens": rng.randint(10, 60)}))  # fmt: skip
            n += 1
    return n


def capacity(path: Path, out: Path, *extra: str) -> tuple[float, dict]:
    report = out / "capacity.json"
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "tailreplay", "capacity", str(path), "--sim-profile",
                    "fast", "--slo", SLO, "--window", "1h", "--max", "16x", "--precision", "5%",
                    "--lag-limit", "50ms", "--out-dir", str(out), "--json", str(report), *extra],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return time.monotonic() - began, json.loads(report.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "window.msgpack"
        n = archive(path, args.rate, args.seconds)
        rows: dict[str, list[tuple[float, dict]]] = {"search": [], "sweep": []}
        for i in range(args.runs):
            rows["search"].append(capacity(path, Path(tmp) / f"search-{i}"))
            rows["sweep"].append(capacity(path, Path(tmp) / f"sweep-{i}", "--sweep", "0.5x"))
    print(f"{n:,} requests over {args.seconds:g} s at {args.rate:g} req/s; {SLO}; "
          f"median of {args.runs} runs")  # fmt: skip
    print("| method | capacity (each run) | bracket (last run) | replays | wall time s (median) |")
    print("|---|---|---|---:|---:|")
    medians = {}
    for name, results in rows.items():
        medians[name] = statistics.median(t for t, _ in results)
        caps = ", ".join(f"{r['capacity']:.3g}x" for _, r in results)
        lo, hi = (f"{x:.3g}x" if x else "-" for x in results[-1][1]["interval"])
        replays = sum(t["runs"] for t in results[-1][1]["trials"])
        print(f"| {name} | {caps} | {lo}..{hi} | {replays} | {medians[name]:.1f} |")
    print(f"search / sweep wall time: {medians['search'] / medians['sweep']:.2f}")


if __name__ == "__main__":
    main()
