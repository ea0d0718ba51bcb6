"""Idle and slowloris clients against the proxy: does a normal client still get in?

One run: ``tailreplay proxy`` under an open-file limit of 1,024 (what many
systemd services inherit) with ``--idle-timeout 3s``, in front of the built-in
simulator. A prober process sends ``GET /v1/models`` on a new connection every
50 ms — for 1 s alone (the baseline), then while 2,000 idle sockets and 500
slowloris clients (a head trickled a line every 0.5 s) connect and are closed by
the proxy. The prober is a process of its own: in the attackers' process its
times would be the attackers' event loop holding the GIL, not the proxy. The
table gives the prober's latency with and without the attack, the ratio between
them, and how the attackers' connections ended.

Run: ``.venv/bin/python bench/hostile.py [--runs 3]``. ``tests/proxy/test_proxy_hostile_clients.py``
plays the same scenario (``attack``) with bounds a busy machine cannot miss.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import multiprocessing
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

IDLE_TIMEOUT_S = 3.0
FD_LIMIT = 1024
IDLE, SLOW = 2_000, 500


def limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def start_proxy(upstream: str, out: Path, port: int, admin: int) -> subprocess.Popen[bytes]:
    """The proxy under the open-file limit, with the attack's timeouts."""
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "tailreplay", "proxy", "--upstream", upstream,
            "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
            "--out", str(out), "--idle-timeout", f"{IDLE_TIMEOUT_S}s", "--body-timeout", "2s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=limit_fds,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline().decode()
    if "listening on" not in line:
        proc.kill()
        raise RuntimeError(line + proc.stderr.read().decode())
    return proc


class Attackers:
    """Idle sockets that never send a byte, and slowloris clients that trickle a head."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []
        self.closed_after: list[float] = []  # seconds from connect to the server's close

    async def connect(self, n: int) -> None:
        async def one() -> None:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                return
            self.streams.append((reader, writer, time.monotonic()))

        await asyncio.gather(*(one() for _ in range(n)))

    async def trickle(self, writer: asyncio.StreamWriter, until: float) -> None:
        """A slowloris: a head a line at a time, never finished."""
        try:
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            i = 0
            while time.monotonic() < until and not writer.is_closing():
                await asyncio.sleep(0.5)
                writer.write(b"X-Slow-%d: 1\r\n" % i)
                i += 1
        except (ConnectionError, RuntimeError):
            return

    async def watch_closes(self, deadline: float) -> None:
        async def one(reader: asyncio.StreamReader, t0: float) -> None:
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0)):
                    while await reader.read(4096):
                        pass
            except TimeoutError:
                return
            except ConnectionError:
                pass
            self.closed_after.append(time.monotonic() - t0)

        await asyncio.gather(*(one(r, t0) for r, _, t0 in self.streams))


def normal_requests(port: int, seconds: float, out: Connection) -> None:
    """A request on a new connection every 50 ms for ``seconds``; sends back the
    times (s) of those answered 200 and what became of the others."""
    times: list[float] = []
    failures: list[str] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        t0 = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", "/v1/models")
            response = conn.getresponse()
            body = response.read()
            if response.status == 200:
                times.append(time.monotonic() - t0)
            else:
                failures.append(f"{response.status} {body[:80]!r}")
        except OSError as exc:
            failures.append(repr(exc))
        finally:
            conn.close()
        time.sleep(0.05)
    out.send((times, failures))


class Prober:
    """``normal_requests`` in a process of its own, started now."""

    def __init__(self, port: int, seconds: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._results, child_end = context.Pipe(duplex=False)
        self._process = context.Process(target=normal_requests, args=(port, seconds, child_end))
        self._process.start()
        self.deadline = time.monotonic() + seconds + 30  # start-up and the last request

    def results(self) -> tuple[list[float], list[str]]:
        try:
            if not self._results.poll(max(self.deadline - time.monotonic(), 0)):
                raise RuntimeError("the prober sent no results in time")
            try:
                times, failures = self._results.recv()
            except EOFError:
                raise RuntimeError("the prober ended without sending its results") from None
        finally:
            self._process.join(5)
            if self._process.is_alive():
                self._process.kill()
        return times, failures


@dataclass
class Attack:
    baseline: list[float]
    """The prober's request times (s) before the attack."""
    during: list[float]
    """... and while it lasts."""
    idle: Attackers
    slow: Attackers
    failures: list[str] = field(default_factory=list)
    """The prober's requests not answered 200, before or during the attack."""


async def attack(port: int) -> Attack:
    """The scenario: a baseline, then the flood with the prober running beside it."""
    baseline, failures = await asyncio.to_thread(Prober(port, 1.0).results)
    idle, slow = Attackers(port), Attackers(port)
    start = time.monotonic()
    prober = Prober(port, IDLE_TIMEOUT_S + 3.0)
    await idle.connect(IDLE)
    await slow.connect(SLOW)
    trickles = [slow.trickle(w, start + 30) for _, w, _ in slow.streams]
    deadline = time.monotonic() + IDLE_TIMEOUT_S + 10.0
    await asyncio.gather(*trickles, idle.watch_closes(deadline), slow.watch_closes(deadline))
    during, more = await asyncio.to_thread(prober.results)
    return Attack(baseline, during, idle, slow, failures + more)


def _ms(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] * 1e3


async def _one_run(sim_url: str) -> dict[str, float]:
    from bench.proxy import cpu_seconds
    from tests.helpers import free_port, metric

    port, admin = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_proxy(sim_url, Path(tmp) / "out", port, admin)
        try:
            cpu_before = cpu_seconds(proc.pid)
            result = await attack(port)
            cpu_s = cpu_seconds(proc.pid) - cpu_before
            admin_url = f"http://127.0.0.1:{admin}"
            evicted = await metric(admin_url, "tailreplay_proxy_connections_evicted_total")
            refused = await metric(admin_url, "tailreplay_proxy_connections_refused_total")
            refused += await metric(admin_url, "tailreplay_proxy_connections_peer_refused_total")
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=60)
    return {
        "base_p50": _ms(result.baseline, 50),
        "base_max": max(result.baseline) * 1e3,
        "p50": _ms(result.during, 50),
        "p99": _ms(result.during, 99),
        "max": max(result.during) * 1e3,
        "closed": len(result.idle.closed_after) + len(result.slow.closed_after),
        "slow_closed_s": max(result.slow.closed_after, default=float("nan")),
        "evicted": evicted,
        "refused": refused,
        "cpu_s": cpu_s,
        "stderr_lines": len(err.splitlines()),
        "failed": len(result.failures),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.helpers
    from tailreplay.sim.launcher import sim_process

    runs = []
    with sim_process(["--decode-base-ms", "1", "--output-mean", "4"]) as sim_url:
        for _ in range(args.runs):
            runs.append(asyncio.run(_one_run(sim_url)))

    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    print(
        f"{IDLE:,} idle + {SLOW} slowloris connections, open-file limit {FD_LIMIT}, "
        f"--idle-timeout {IDLE_TIMEOUT_S:.0f}s; median of {args.runs} runs\n"
    )
    print("| normal request (new connection) | P50 ms | P99 ms | max ms | max / baseline max |")
    print("|---|---:|---:|---:|---:|")
    print(f"| before the attack | {med('base_p50'):.1f} | | {med('base_max'):.1f} | 1.0 |")
    print(
        f"| during the attack | {med('p50'):.1f} | {med('p99'):.1f} | {med('max'):.1f} "
        f"| {med('max') / med('base_max'):.1f} |"
    )
    print()
    print(
        f"attacking connections closed by the proxy: {med('closed'):,.0f} "
        f"of {IDLE + SLOW:,} "
        f"(pushed out at the cap: {med('evicted'):,.0f}, refused a slot there: "
        f"{med('refused'):,.0f}); last slowloris closed "
        f"{med('slow_closed_s'):.1f} s after connecting; the proxy's CPU over the run "
        f"(baseline and attack): {med('cpu_s'):.2f} s; "
        f"proxy stderr lines: {med('stderr_lines'):.0f}; normal requests not answered "
        f"200: {sum(r['failed'] for r in runs):.0f} in all runs"
    )


if __name__ == "__main__":
    main()
