"""The dispatcher's last wait before each send: its lag, and the CPU it costs.

For each rate, an archive of evenly spaced requests (16-token prompts, 2-token
outputs) is replayed for ``--seconds`` at nginx returning a fixed body by one
process (``--workers``), alternating the arms run by run: this checkout's
dispatcher; the same with the timerfd turned off (``--yield``: it yields to the loop
for the last 1.5 ms before each send, as where there is no timerfd); and another
commit's (``--baseline-python``, an interpreter with that commit installed:
``bench/baseline_env.sh COMMIT``); with ``--floor``, a bare asyncio Protocol
paced by the same timerfd (``PACED_FLOOR``); and with ``--pinned``, this checkout's
replay on CPU 0 with nginx on CPU 1 for its runs (``taskset``): each answer then
wakes the replay from idle on its own core rather than nginx running between the
replay's steps on the same one. Printed per rate and arm, the median over
``--runs``: the replay's own lag P50 / P99, requests dropped, and its CPU as a share
of one core over the dispatch's span (from t0 until everything is sent; start-up
and the answers after it left out: the summary's ``client.cpu_share``); then the
runs whose lag P99 was over 0.5 ms; and where any, the most that a run's dispatching
thread waited for a CPU (other processes held the cores) and the host stole.

Needs nginx. Run: ``.venv/bin/python bench/dispatch_wait.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import even_archive
from replay_cpu import _chat_body

from proxy import free_port, nginx, process, process_tree

NO_TIMERFD = """\
import tailreplay.replayer.timer as timer
timer.PreciseTimer.open = classmethod(lambda cls, loop: None)
"""
OVER_MS = 0.5
PACED_FLOOR = """
import asyncio, json, sys, time, httptools
from tailreplay.replayer.timer import PreciseTimer
port, rate, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
body = sys.stdin.buffer.read()
request = (b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n"
           b"Content-Type: application/json\\r\\nContent-Length: %d\\r\\n\\r\\n%b"
           % (len(body), body))
class Client(asyncio.Protocol):
    def __init__(self):
        self.parser, self.busy, self.sent = httptools.HttpResponseParser(self), False, 0
    def connection_made(self, transport):
        self.transport = transport
    def data_received(self, data):
        self.parser.feed_data(data)
    def on_message_complete(self):
        self.busy = False
async def main():
    loop = asyncio.get_running_loop()
    n = int(rate * seconds)
    clients = [(await loop.create_connection(Client, "127.0.0.1", port))[1]
               for _ in range(n // 900 + 8)]  # each under nginx's keepalive_requests
    timer, lags, k = PreciseTimer.open(loop), [], 0
    t0 = time.monotonic() + 0.1
    cpu0, wall0 = time.process_time(), time.monotonic()
    for i in range(n):
        due = t0 + i / rate
        await timer.wait_until(due)
        while clients[k % len(clients)].busy or clients[k % len(clients)].sent >= 900:
            k += 1
            if k % len(clients) == 0:
                await asyncio.sleep(0)
        lags.append(time.monotonic() - due)
        c = clients[k % len(clients)]
        c.busy, c.sent, k = True, c.sent + 1, k + 1
        c.transport.write(request)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    lags.sort()
    print(json.dumps({"p50": lags[n // 2] * 1e3, "p99": lags[int(n * 0.99)] * 1e3,
                      "dropped": 0, "cpu": cpu / wall, "steal": 0.0, "queued": 0.0}))
asyncio.run(main())
"""
"""A bare asyncio Protocol with httptools paced by the same timerfd, a wake-up a
request: what the machine charges a process that sends alone, at the rate, and waits
for nothing else (its CPU from its first wait to its last send)."""

Run = dict[str, float]
"""One replay: lag P50 and P99 (ms), dropped, CPU share of a core, steal share."""


def replay(
    py: str, url: str, archive: Path, tmp: Path, args: argparse.Namespace, env: dict[str, str]
) -> Run:
    """One replay by interpreter ``py``, run from ``tmp`` (so that an interpreter with
    another commit installed does not import this checkout's); under ``PINNED`` in
    ``env``, on the CPU it names."""
    summary = tmp / "s.json"
    pin = ["taskset", "-c", env[PINNED]] if PINNED in env else []
    subprocess.run(
        [*pin, py, "-m", "tailreplay", "replay", "--target", url, "--json", str(summary),
         "--out", str(tmp / "r.msgpack"), "--overwrite", "--tail-stretch", "1",
         "--workers", str(args.workers), "--event-loop", args.event_loop, str(archive)],
        check=True, capture_output=True, env=env, cwd=tmp,
    )  # fmt: skip
    s = json.loads(summary.read_text())
    client = s.get("client") or {}
    return {
        "p50": s["lag_ms"]["p50"],
        "p99": s["lag_ms"]["p99"],
        "dropped": s["dropped"],
        "cpu": client.get("cpu_share") or 0.0,
        "steal": client.get("steal_share") or 0.0,
        "queued": client.get("cpu_wait_share") or 0.0,
    }


def paced_floor(port: int, rate: int, args: argparse.Namespace) -> Run:
    """One run of the paced floor (``PACED_FLOOR``), with the replay's request body."""
    out = subprocess.run(
        [sys.executable, "-c", PACED_FLOOR, str(port), str(rate), str(args.seconds)],
        input=_chat_body(), check=True, capture_output=True,
    )  # fmt: skip
    run: Run = json.loads(out.stdout)
    return run


def arms(args: argparse.Namespace, tmp: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """Each arm's name: its interpreter and environment."""
    here = dict(os.environ)
    out = {"this checkout": (sys.executable, here)}
    if args.baseline_python:
        out["baseline"] = (str(Path(args.baseline_python).absolute()), here)
    if args.pinned:
        out[PINNED_ARM] = (sys.executable, {**here, PINNED: "0"})
    if args.yield_arm:
        (tmp / "yield").mkdir()
        (tmp / "yield" / "sitecustomize.py").write_text(NO_TIMERFD)
        out["yield 1.5 ms"] = (sys.executable, {**here, "PYTHONPATH": str(tmp / "yield")})
    return out


FLOOR = "floor: bare Protocol"
PINNED = "TAILREPLAY_BENCH_CPU"
PINNED_ARM = "this checkout, pinned apart"


def pin_tree(pid: int, cpus: set[int]) -> None:
    """``pid`` and its descendants (nginx's master and workers) onto ``cpus``."""
    for p in process_tree(pid):
        with contextlib.suppress(OSError):  # ended meanwhile
            os.sched_setaffinity(p, cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="500,2000,8000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--event-loop", default="asyncio")
    parser.add_argument("--baseline-python", help="an interpreter with another commit installed")
    parser.add_argument("--yield", dest="yield_arm", action="store_true",
                        help="also the yield without a timerfd")  # fmt: skip
    parser.add_argument("--floor", action="store_true",
                        help="also a bare Protocol paced by the timerfd")  # fmt: skip
    parser.add_argument(
        "--pinned", action="store_true", help="also this checkout on CPU 0, nginx on CPU 1"
    )
    args = parser.parse_args()
    rows: list[tuple[int, dict[str, list[Run]]]] = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        tried = arms(args, tmp)
        port = free_port()
        with process(nginx(tmp, 1, free_port(), port, fixed=port), port) as server:
            url = f"http://127.0.0.1:{port}"
            every_cpu = os.sched_getaffinity(0)
            for rate in (int(r) for r in args.rates.split(",")):
                archive = tmp / f"even-{rate}.msgpack"
                even_archive(archive, rate, args.seconds)
                got: dict[str, list[Run]] = {name: [] for name in tried}
                for _ in range(args.runs):
                    for name, (py, env) in tried.items():
                        pin_tree(server, {1} if PINNED in env else every_cpu)
                        got[name].append(replay(py, url, archive, tmp, args, env))
                    pin_tree(server, every_cpu)
                    if args.floor:
                        got.setdefault(FLOOR, []).append(paced_floor(port, rate, args))
                rows.append((rate, got))
    report(args, [*tried, *([FLOOR] if args.floor else [])], rows)


def _cell(runs: list[Run]) -> str:
    med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    over = sum(r["p99"] > OVER_MS for r in runs)
    steal, queued = max(r["steal"] for r in runs), max(r["queued"] for r in runs)
    cell = (f"{med['p50']:.2f} / {med['p99']:.2f}, {med['dropped']:,.0f}, "
            f"{med['cpu'] * 100:.0f}%, {over} of {len(runs)}")  # fmt: skip
    cell += f", queued {queued * 100:.0f}%" if queued >= 0.01 else ""
    return cell + (f", steal {steal * 100:.1f}%" if steal >= 0.0005 else "")


def report(
    args: argparse.Namespace, names: list[str], rows: list[tuple[int, dict[str, list[Run]]]]
) -> None:
    print(f"{args.seconds:g} s per rate; nginx; {args.workers} process(es) on {args.event_loop}; "
          f"median of {args.runs} runs each, alternating: lag P50 / P99 ms, dropped, CPU "
          f"(% of a core, over the dispatch), runs over {OVER_MS} ms of lag P99; where "
          "any, at most: the replay's wait for a CPU (queued) and the host's steal, as "
          "shares of the run")  # fmt: skip
    print()
    print("| rate/s |" + "".join(f" {name} |" for name in names))
    print("|---:|" + "---|" * len(names))
    for rate, got in rows:
        print(f"| {rate:,} |" + "".join(f" {_cell(got[name])} |" for name in names))


if __name__ == "__main__":
    main()
