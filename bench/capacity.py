"""Does the capacity search find what a brute-force sweep finds, in less time?

One recorded window (Poisson arrivals at ``--rate`` for ``--seconds``, prompts of
100-1,500 tokens, 10-60 output tokens, streamed) against the built-in simulator
(``fast`` profile, a fresh one per replay) with ``--slo`` (default
``latency:p99<=1500ms``), on two targets:

- **batching**: the profile as it is (256 sequences): past 1x the batch grows and
  the P99 with it, slowly (a soft knee);
- **queue**: ``--max-num-seqs`` sequences at most (``--seqs``), so past the limit a
  queue forms and the P99 runs away (a sharp knee).

On each, two methods:

- **search**: ``tailreplay capacity`` (coarse replays of a quarter of the window's span
  to aim, full ones to decide, ``--precision``);
- **sweep**: ``tailreplay capacity --sweep 0.5x``: full replays at 1x, 1.5x, 2x, ...
  until one does not pass.

Each is run ``--runs`` times, alternating; the table has each one's median wall
time, its capacity and bracket, and the search's time over the sweep's.

    .venv/bin/python bench/capacity.py --runs 3
    .venv/bin/python bench/capacity.py --runs 3 --slo 'latency:p99<=3000ms'
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack


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


def capacity(path: Path, out: Path, slo: str, *extra: str) -> tuple[float, dict]:
    report = out / "capacity.json"
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "tailreplay", "capacity", str(path), "--sim-profile",
                    "fast", "--slo", slo, "--window", "1h", "--max", "16x",
                    "--lag-limit", "50ms", "--out-dir", str(out), "--overwrite",
                    "--json", str(report), *extra],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return time.monotonic() - began, json.loads(report.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--seqs", type=int, default=28, help="The queue target's max-num-seqs.")
    ap.add_argument("--precision", default="5%")
    ap.add_argument("--slo", default="latency:p99<=1500ms")
    ap.add_argument("--targets", default="batching,queue", help="Which targets, comma-separated.")
    args = ap.parse_args()
    targets = {"batching": [], "queue": [f"--sim-arg=--max-num-seqs={args.seqs}"]}
    targets = {k: v for k, v in targets.items() if k in args.targets.split(",")}
    methods = {"search": ["--precision", args.precision], "sweep": ["--sweep", "0.5x"]}
    rows: dict[tuple[str, str], list[tuple[float, dict]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "window.msgpack"
        n = archive(path, args.rate, args.seconds)
        for i in range(args.runs):
            for (target, sim), (method, how) in itertools.product(targets.items(), methods.items()):
                out = Path(tmp) / f"{target}-{method}-{i}"
                result = capacity(path, out, args.slo, *sim, *how)
                rows.setdefault((target, method), []).append(result)
    print(f"{n:,} requests over {args.seconds:g} s at {args.rate:g} req/s; {args.slo}; "
          f"search --precision {args.precision}; median of {args.runs} runs")  # fmt: skip
    print("| target | method | capacity (each run) | interval (last run) | replays | "
          "wall time s (median) |\n|---|---|---|---|---:|---:|")  # fmt: skip
    medians = {}
    for (target, method), results in rows.items():
        medians[target, method] = statistics.median(t for t, _ in results)
        caps = ", ".join(f"{r['capacity']:.3g}x" for _, r in results)
        lo, hi = (f"{x:.3g}x" if x else "-" for x in results[-1][1]["interval"])
        replays = sum(t["runs"] for t in results[-1][1]["trials"])
        print(f"| {target} | {method} | {caps} | {lo}..{hi} | {replays} | "
              f"{medians[target, method]:.1f} |")  # fmt: skip
    for target in targets:
        ratio = medians[target, "search"] / medians[target, "sweep"]
        print(f"{target}: search / sweep wall time {ratio:.2f}")
    for (target, method), results in rows.items():
        for _, r in results:
            if r.get("note"):
                print(f"{target} {method}: {r['note']}")
    for (target, method), results in rows.items():
        # The order trials ran in, each with its verdict and the share it was served.
        path = ", ".join(
            f"{t['factor']:.3g}x{'c' if t['coarse'] else ''} {t['verdict']}"
            + (f" (served {t['served']:.2f})" if t.get("served") is not None else "")
            for t in results[-1][1]["trials"]
        )
        print(f"{target} {method} (last run): {path}")


if __name__ == "__main__":
    main()
