"""What a faulty shadow does to production's latency: the same proxy with no shadow,
and with a share of the requests copied (``--share``, default 10%; 100%: every one)
to a shadow that is dead (nothing listens), hangs (reads the copy, never answers),
answers 500, or attacks with its answers (``bench/hostile_shadow.py``: a flood of
``100 Continue``, an endless stream, a slow drip, a reset mid-body, endless headers,
a 200 MB body).

The upstream is nginx returning a fixed JSON body (or, without nginx, a small
aiohttp server); with ``--upstream-ms 150``, an aiohttp server that answers each
request after that long (an LLM's pace: the proxy's added milliseconds are then
a small part of the latency, as they are in production). An open-loop client
sends the chat body at ``--rate`` a second (below what the proxy can serve: the
load a shadow is meant for) for ``--seconds`` to each proxy in turn; rounds are
interleaved (one run of each proxy, then the next round, each proxy first in
turn), so the machine's drift hits every row alike. The table
gives the medians over the rounds of the P50 and P99, and each one's ratio to the
proxy without a shadow, and the copies each proxy cut at a bound (read off its
``/metrics``).

    .venv/bin/python bench/shadow_faults.py [--share 10%] [--rate 500] [--seconds 10] [--runs 5]
        [--upstream-ms 0] [--kinds dead,hang,500,flood,endless,drip,reset,headers,huge]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import aiohttp
from aiohttp import web
from hostile_shadow import KINDS  # bench/hostile_shadow.py

from proxy import BODY, REPLY, ROOT, free_port, nginx, process  # bench/proxy.py

HERE = Path(__file__).resolve().parent


def shadow_server(kind: str, port: int) -> None:
    """A shadow that hangs or answers 500 (run as ``--shadow-server KIND PORT``)."""

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        if kind == "hang":
            await asyncio.sleep(3600)
        return web.json_response({"error": {"message": "down"}}, status=500)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def paced_upstream(ms: float, port: int) -> None:
    """The fixed chat answer after ``ms`` (run as ``--paced-upstream MS PORT``)."""

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(ms / 1000)
        return web.Response(text=REPLY, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


async def open_loop(url: str, rate: float, seconds: float) -> tuple[float, float]:
    """Requests sent at ``rate`` a second for ``seconds``, each at its time whatever the
    others do (an open loop: a slow answer does not slow the arrivals), over a pool of
    keep-alive connections; the P50 and P99 of their latency (ms)."""
    latencies: list[float] = []
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            t0 = time.perf_counter()
            async with session.post(url + "/v1/chat/completions", data=BODY, headers=headers) as r:
                await r.read()
                assert r.status == 200, r.status
            latencies.append((time.perf_counter() - t0) * 1e3)

        start = time.perf_counter()
        tasks = []
        for n in range(int(rate * seconds)):
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one()))
        await asyncio.gather(*tasks)
    latencies.sort()
    return latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--share", default="10%", help="--shadow-share of the shadowed proxies")
    parser.add_argument(
        "--upstream-ms", type=float, default=0, help="answer after this long (0: nginx at once)"
    )
    parser.add_argument(
        "--kinds",
        default=",".join(("dead", "hang", "500", *KINDS)),
        help="the shadows, comma-separated",
    )
    args = parser.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        up = free_port()
        if args.upstream_ms > 0:
            paced = [py, __file__, "--paced-upstream", str(args.upstream_ms), str(up)]
            stack.enter_context(process(paced, up))
        elif shutil.which("nginx"):
            stack.enter_context(process(nginx(tmp, 1, free_port(), up, fixed=up), up))
        else:
            fixed = [py, str(ROOT / "bench/proxy.py"), "--fixed", str(up)]
            stack.enter_context(process(fixed, up))
        shadows: dict[str, str] = {}
        for kind in args.kinds.split(","):
            port = free_port()
            shadows[kind] = f"http://127.0.0.1:{port}"
            if kind == "dead":
                continue  # nothing listens there
            if kind in KINDS:
                command = [py, str(HERE / "hostile_shadow.py"), kind, str(port)]
            else:
                command = [py, __file__, "--shadow-server", kind, str(port)]
            stack.enter_context(process(command, port))
        proxies: dict[str, int] = {}
        admins: dict[str, int] = {}
        for name, shadow in [("no shadow", None), *shadows.items()]:
            port, admin = free_port(), free_port()
            command = [
                py,
                "-m",
                "tailreplay",
                "proxy",
                "--upstream",
                f"http://127.0.0.1:{up}",
                "--listen",
                f"127.0.0.1:{port}",
                "--admin-listen",
                f"127.0.0.1:{admin}",
                "--out",
                str(tmp / f"cap-{port}"),
                "--drain-timeout",
                "1s",
            ]
            if shadow is not None:
                command += ["--shadow", shadow, "--shadow-share", args.share]
            stack.enter_context(process(command, port))
            label = name if shadow is None else f"shadow {name}"
            proxies[label], admins[label] = port, admin
        for port in proxies.values():  # warm-up
            asyncio.run(open_loop(f"http://127.0.0.1:{port}", args.rate, 1))
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in proxies}
        order = list(proxies)
        for _ in range(args.runs):
            for name in order:
                url = f"http://127.0.0.1:{proxies[name]}"
                results[name].append(asyncio.run(open_loop(url, args.rate, args.seconds)))
            order = order[1:] + order[:1]  # each proxy goes first in turn
        cut = {name: _cut(admins[name]) for name in proxies}
    pace = f"answered after {args.upstream_ms:g} ms" if args.upstream_ms else "answered at once"
    print(
        f"{args.rate:g} POSTs a second for {args.seconds} s (open loop), {pace}; "
        f"--shadow-share {args.share}; median of {args.runs} interleaved runs"
    )
    print()
    print("| proxy | P50 ms | P99 ms | P50 / no shadow | P99 / no shadow | copies cut |")
    print("|---|---:|---:|---:|---:|---:|")
    base50 = statistics.median(p50 for p50, _ in results["no shadow"])
    base99 = statistics.median(p99 for _, p99 in results["no shadow"])
    for name, runs in results.items():
        p50 = statistics.median(r[0] for r in runs)
        p99 = statistics.median(r[1] for r in runs)
        print(
            f"| {name} | {p50:.2f} | {p99:.2f} | {p50 / base50:.2f} | {p99 / base99:.2f} "
            f"| {cut[name]} |"
        )


def _cut(admin: int) -> str:
    """The proxy's count of copies cut at a bound, from its /metrics ("-": no shadow)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith("tailreplay_proxy_shadow_cut_total "):
            return f"{float(line.split()[1]):,.0f}"
    return "-"


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--shadow-server":
        shadow_server(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "--paced-upstream":
        paced_upstream(float(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
