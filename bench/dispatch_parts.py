"""Where a paced replay's CPU goes, request by request: its parts' thread CPU.

One replay process sends evenly spaced chat requests (16-token prompts, 2-token
outputs) at ``--rate`` to nginx returning a fixed body, for ``--seconds``. A
``sitecustomize`` in the replay's interpreter wraps the synchronous steps a request
passes through and adds up their thread CPU (``time.thread_time``): reading and
planning the schedule, building the request, writing it, the answer's bytes parsed,
its reading finished, the result recorded, the timerfd's wake-up; and the event
loop's turns as a whole, which hold all of these and the rest: the lines of the
coroutines a request runs through (the dispatcher's, the attempt's, the pool's) and
the loop's own machinery (the polls that sleep and wake, tasks and futures).
Printed per part, the median over ``--runs``: microseconds a request, and its share
of the loop's. Beside it, the
paced floor (``dispatch_wait.PACED_FLOOR``: a bare Protocol paced by the same
timerfd) and its CPU a request. With ``--no-wait``, the replay's last wait before
each send is turned off (the timer wakes it at the due time itself), so the table is
the requests' own work.

Each clock read costs some 0.5 µs, a few a request: the parts are slightly dearer
than unwrapped. Needs nginx. Run: ``.venv/bin/python bench/dispatch_parts.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dispatch_wait import paced_floor
from replay import even_archive

from proxy import free_port, nginx, process

PARTS = """
import atexit, collections, functools, json, os, sys, time
if "replay" in sys.argv:
    import tailreplay.replayer.timer as timer
    from tailreplay.http import connection
    from tailreplay.replayer import dispatch, lookahead, transport
    import asyncio.base_events as base_events
    if os.environ.get("PARTS_NO_WAIT"):
        timer.WakeMargin.at = lambda self, due: 0.0
    cpu, calls = collections.Counter(), collections.Counter()
    def wrap(owner, name, label):
        inner = getattr(owner, name)
        @functools.wraps(inner)
        def timed(*args, **kwargs):
            began = time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                cpu[label] += time.thread_time() - began
                calls[label] += 1
        setattr(owner, name, timed)
    for owner, name, label in (
        (lookahead.Lookahead, "_peek", "schedule: read and plan"),
        (lookahead.Lookahead, "_build", "build the request"),
        (transport.HttpTransport, "send", "request head"),
        (connection.Connection, "write", "write (send syscall)"),
        (connection.Connection, "data_received", "answer bytes parsed"),
        (transport._Reader, "__init__", "answer: reader made"),
        (transport._Reader, "finish", "answer: read and counted"),
        (dispatch.Dispatcher, "_done", "result recorded"),
        (timer.PreciseTimer, "_fired", "timerfd wake-up"),
        (base_events.BaseEventLoop, "_run_once", "loop turns, all"),
    ):
        wrap(owner, name, label)
    def dump():
        out = os.environ["PARTS_OUT"]
        with open(out, "w") as f:
            json.dump({k: [cpu[k], calls[k]] for k in cpu}, f)
    atexit.register(dump)
"""
LOOP = "loop turns, all"


def one_run(url: str, archive: Path, tmp: Path, no_wait: bool) -> dict[str, float]:
    """One replay: each part's CPU a request (µs), and the replay's own CPU share."""
    site = tmp / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(PARTS)
    env = {**os.environ, "PYTHONPATH": str(site), "PARTS_OUT": str(tmp / "parts.json")}
    if no_wait:
        env["PARTS_NO_WAIT"] = "1"
    summary = tmp / "s.json"
    subprocess.run(
        [sys.executable, "-m", "tailreplay", "replay", "--target", url, "--json", str(summary),
         "--out", str(tmp / "r.msgpack"), "--overwrite", "--tail-stretch", "1", str(archive)],
        check=True, capture_output=True, env=env, cwd=tmp,
    )  # fmt: skip
    s = json.loads(summary.read_text())
    n = s["sent"]
    parts = json.loads((tmp / "parts.json").read_text())
    got = {label: cpu_s * 1e6 / n for label, (cpu_s, _) in parts.items()}
    got["turns a request"] = parts[LOOP][1] / n
    got["cpu share"] = s["client"]["cpu_share"]
    got["lag p99 ms"] = s["lag_ms"]["p99"]
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-wait", action="store_true", help="no busy wait before each send")
    args = parser.parse_args()
    runs, floors = [], []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        port = free_port()
        with process(nginx(tmp, 1, free_port(), port, fixed=port), port):
            archive = tmp / "even.msgpack"
            even_archive(archive, args.rate, args.seconds)
            floor_args = argparse.Namespace(seconds=args.seconds)
            for _ in range(args.runs):
                runs.append(one_run(f"http://127.0.0.1:{port}", archive, tmp, args.no_wait))
                floors.append(paced_floor(port, args.rate, floor_args)["cpu"])
    report(args, runs, floors)


def report(args: argparse.Namespace, runs: list[dict[str, float]], floors: list[float]) -> None:
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    loop = med[LOOP]
    share, floor = med["cpu share"], statistics.median(floors)
    wait = "off (woken at due)" if args.no_wait else "on"
    print(f"{args.rate:,}/s for {args.seconds:g} s at nginx, median of {args.runs} runs; "
          f"last wait before each send {wait}: replay CPU {share:.0%} of a core "
          f"({share / args.rate * 1e6:.0f} µs a request, lag P99 {med['lag p99 ms']:.2f} ms), "
          f"paced floor {floor:.0%} ({floor / args.rate * 1e6:.0f} µs a request); "
          f"{med['turns a request']:.1f} loop turns a request")  # fmt: skip
    print()
    print("| part | µs a request | share of the loop's |")
    print("|---|---:|---:|")
    named = [k for k in med if k not in (LOOP, "turns a request", "cpu share", "lag p99 ms")]
    for label in sorted(named, key=lambda k: -med[k]):
        print(f"| {label} | {med[label]:.1f} | {med[label] / loop:.0%} |")
    rest = loop - sum(med[k] for k in named)
    print(f"| the rest: coroutines' own lines, polls, tasks, futures | {rest:.1f} | "
          f"{rest / loop:.0%} |")  # fmt: skip
    print(f"| **loop turns, all** | **{loop:.1f}** | 100% |")


if __name__ == "__main__":
    main()
