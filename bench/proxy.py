"""Proxy overhead: requests/s and latency through tailreplay vs the alternatives.

All in one run, on loopback: wrk POSTs a chat-completions body (50 connections)
to each of
- direct: the upstream itself (nginx returning a fixed JSON body; so the upstream
  is never the bottleneck), or an aiohttp fixed responder without nginx,
- bare: bench/bare_forwarder.py, the least an aiohttp forwarder can do (baseline),
- tailreplay: ``tailreplay proxy`` with recording on,
- nginx: nginx as a reverse proxy (``proxy_buffering off``), if installed,
and the same with two processes (``--workers 2``, nginx ``worker_processes 2``).
Each row gives the CPU time per request of the target's processes (the proxy
with its recorder, nginx with its workers), read from /proc around each run: on
a shared machine far steadier than requests/s. ``--baseline-python PY`` (given
once per baseline) adds a row for ``tailreplay proxy`` run by another
interpreter — one where another commit is installed (``bench/baseline_env.sh
COMMIT``) — measured side by side.
Then an SSE run: 100 concurrent streams through each proxy, with the added
time to first token (P50/P99 over direct), and through bench/raw_forwarder.py —
bytes passed through, no HTTP beyond a Content-Length: the floor for any
forwarder written in Python on asyncio, on this machine — and bench/aiohttp_floor.py,
the proxy's way of passing an exchange on (aiohttp's server, its own upstream
client and relay) with nothing recorded: the floor of a proxy on aiohttp's server.

Needs wrk (``apt-get install -y wrk nginx-light``). Run: ``.venv/bin/python bench/proxy.py``,
or against a baseline commit:
``.venv/bin/python bench/proxy.py --baseline-python "$(bench/baseline_env.sh 2c473bf)"``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
BODY = (
    '{"model":"m","messages":[{"role":"user","content":"Say hello in five words."}],'
    '"max_tokens":16}'
)
REPLY = (
    '{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m",'
    '"choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, how are you?"},'
    '"finish_reason":"stop"}],"usage":{"prompt_tokens":14,"completion_tokens":7,"total_tokens":21}}'
)
Row = tuple[str, float, float, float, float]
SHADOWING = "tailreplay, shadowing 10%"
"""(target, requests/s, P50 ms, P99 ms, CPU µs per request), medians over the runs."""
SSE_EVENTS = 40
SSE_GAP_S = 0.02


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


@contextmanager
def process(cmd: list[str], port: int, cwd: Path | None = None) -> Iterator[int]:
    """Run ``cmd`` until the block ends; its pid once it listens on ``port``."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    try:
        wait_port(port)
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def nginx_conf(tmp: Path, workers: int, listen: int, upstream: int, fixed: int | None) -> Path:
    fixed_server = (
        f"server {{ listen 127.0.0.1:{fixed}; location / {{ default_type application/json; "
        f"return 200 '{REPLY}'; }} }}"
        if fixed
        else ""
    )
    conf = tmp / f"nginx-{listen}.conf"
    conf.write_text(
        f"""
user root; worker_processes {workers}; pid {tmp}/nginx-{listen}.pid; error_log {tmp}/error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fcgi; uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  upstream up {{ server 127.0.0.1:{upstream}; keepalive 128; }}
  server {{ listen 127.0.0.1:{listen}; location / {{ proxy_pass http://up; proxy_http_version 1.1;
    proxy_set_header Connection ""; proxy_buffering off; }} }}
  {fixed_server}
}}
"""
    )
    return conf


def nginx(
    tmp: Path, workers: int, listen: int, upstream: int, fixed: int | None = None
) -> list[str]:
    conf = nginx_conf(tmp, workers, listen, upstream, fixed)
    return ["nginx", "-c", str(conf), "-p", str(tmp), "-g", "daemon off;"]


def process_tree(pid: int) -> Iterator[int]:
    """``pid`` and every descendant now alive (Linux /proc), parents first."""
    pending = [pid]
    while pending:
        p = pending.pop()
        try:
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue  # ended meanwhile
        yield p
        pending += map(int, children)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of ``pid`` and every descendant now alive (Linux /proc)."""
    total = 0.0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def measured(url: str, seconds: int, pid: int) -> tuple[float, float, float, float]:
    """wrk's (requests/s, P50 ms, P99 ms) and the CPU µs per request of ``pid``'s tree
    (read after a pause, so that the recorder has caught up with the run)."""
    before = cpu_seconds(pid)
    rps, p50, p99, requests = wrk(url, seconds)
    time.sleep(1.0)
    return rps, p50, p99, (cpu_seconds(pid) - before) / requests * 1e6


def wrk(url: str, seconds: int) -> tuple[float, float, float, int]:
    """(requests/s, P50 ms, P99 ms, requests)."""
    script = Path(tempfile.gettempdir()) / "tailreplay-post.lua"
    script.write_text(
        'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        f"wrk.body = '{BODY}'\n"
    )
    out = wrk_output(url, seconds, script)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]

    def pct(p: str) -> float:
        value, unit = re.search(rf"\s{p}%\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{url}: {errors.group(1)} failed responses")
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    return rps, pct("50"), pct("99"), requests


def wrk_output(url: str, seconds: int, script: Path, cpus: str | None = None) -> str:
    """wrk's report of ``seconds`` of POSTs to ``url``'s chat route by ``script`` (on
    ``cpus`` alone, if given)."""
    command = ["wrk", "-t2", "-c50", f"-d{seconds}s", "--latency", "-s", str(script)]
    if cpus is not None:
        command = ["taskset", "-c", cpus, *command]
    return subprocess.run(
        [*command, url + "/v1/chat/completions"], capture_output=True, text=True, check=True
    ).stdout


async def sse_handler(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    chunk = b'data: {"choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}\n\n'
    for _ in range(SSE_EVENTS):
        await resp.write(chunk)
        await asyncio.sleep(SSE_GAP_S)
    await resp.write(b"data: [DONE]\n\n")
    return resp


def sse_server(port: int) -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", sse_handler)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def fixed_server(port: int) -> None:
    async def reply(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text=REPLY, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", reply)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


class _Streams(asyncio.Protocol):
    """SSE requests one after another on one keep-alive connection, each timed to its
    first event.

    A bare asyncio protocol rather than an aiohttp client: with 100 streams of 50
    events a second, a full client's per-event work (a coroutine resumed, a chunk
    object) made the measuring process the bottleneck, and its own scheduling
    delay, not the proxy's, dominated the P99 (±2 ms between identical runs).
    Here each arrival is one callback. A response ends with the last chunk of its
    chunked body (``0\\r\\n\\r\\n``), as every server here sends SSE.
    """

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[float | None] | None = None
        self.t0 = 0.0
        self.first: float | None = None
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self) -> asyncio.Future[float | None]:
        assert self.transport is not None
        self.done = asyncio.get_running_loop().create_future()
        self.first, self.tail = None, b""
        self.t0 = time.monotonic()
        self.transport.write(self.request)
        return self.done

    def data_received(self, data: bytes) -> None:
        if self.first is None and b"data:" in data:
            self.first = (time.monotonic() - self.t0) * 1000
        self.tail = (self.tail + data)[-5:]
        if self.tail == b"0\r\n\r\n" and self.done is not None and not self.done.done():
            self.done.set_result(self.first)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)


async def ttfts(url: str, streams: int, seconds: float) -> list[float]:
    """Time to first event of every stream, with ``streams`` in flight at all times.

    Each of ``streams`` clients (one keep-alive connection each, as SDK clients
    pool them) opens a stream as soon as its last one ended; their starts are
    staggered across one stream's length, so new streams arrive evenly (about
    streams / 0.8 s) instead of in one synchronised burst.
    """
    host, port = url.removeprefix("http://").split(":")
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}'
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (f"{host}:{port}".encode(), len(body), body)
    )
    out: list[float] = []
    stream_s = SSE_EVENTS * SSE_GAP_S
    loop = asyncio.get_running_loop()
    stop = time.monotonic() + seconds

    async def client(i: int) -> None:
        await asyncio.sleep(stream_s * i / streams)
        transport, conn = await loop.create_connection(lambda: _Streams(request), host, int(port))
        try:
            while time.monotonic() < stop:
                first = await conn.send()
                if first is not None:
                    out.append(first)
        finally:
            transport.close()

    await asyncio.gather(*(client(i) for i in range(streams)))
    return out


def tailreplay_proxy(
    port: int, upstream: int, out: Path, workers: int = 1, python: str = sys.executable
) -> list[str]:
    listen = ["--listen", f"127.0.0.1:{port}", "--admin-listen", "off"]
    upstream_url = f"http://127.0.0.1:{upstream}"
    command = [python, "-m", "tailreplay", "proxy", "--upstream", upstream_url, *listen]
    return [*command, "--out", str(out), "--workers", str(workers)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--only", choices=["post", "sse"], default=None)
    parser.add_argument(
        "--baseline-python",
        action="append",
        default=[],
        help="an interpreter with another commit of tailreplay installed: its proxy too "
        "(once per commit)",
    )
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("bench/proxy.py needs wrk: apt-get install -y wrk nginx-light")
    have_nginx = shutil.which("nginx") is not None
    rows: list[Row] = []
    if args.only != "sse":
        rows = post_runs(args, have_nginx)
    sse_rows = sse_runs(args, have_nginx) if args.only != "post" else []
    report(args, rows, sse_rows)


def post_runs(args: argparse.Namespace, have_nginx: bool) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        targets = _post_targets(args, have_nginx, tmp, stack)
        for port, _ in targets.values():
            wrk(f"http://127.0.0.1:{port}", 1)  # warm-up
        # Interleaved (one run of each target, then the next round), so the drift of a
        # shared machine hits every target alike instead of whichever ran last.
        results: dict[str, list[tuple[float, float, float, float]]] = {n: [] for n in targets}
        for _ in range(args.runs):
            for name, (port, pid) in targets.items():
                results[name].append(measured(f"http://127.0.0.1:{port}", args.seconds, pid))
    return [
        (name, *(statistics.median(r[i] for r in runs) for i in range(4)))  # type: ignore[misc]
        for name, runs in results.items()
    ]


def _post_targets(
    args: argparse.Namespace, have_nginx: bool, tmp: Path, stack: ExitStack
) -> dict[str, tuple[int, int]]:
    """Every target started (kept running by ``stack``): name to (port, pid)."""
    py = sys.executable
    up = free_port()
    if have_nginx:
        direct = stack.enter_context(process(nginx(tmp, 1, free_port(), up, fixed=up), up))
    else:
        direct = stack.enter_context(process([py, __file__, "--fixed", str(up)], up))
    targets = {"direct": (up, direct)}

    def start(name: str, command: list[str], cwd: Path | None = None) -> None:
        port = int(command[command.index("--listen") + 1].rsplit(":", 1)[1])
        targets[name] = (port, stack.enter_context(process(command, port, cwd)))

    bare = free_port()
    bare_command = [py, str(ROOT / "bench/bare_forwarder.py"), str(bare), f"http://127.0.0.1:{up}"]
    targets["bare forwarder"] = (bare, stack.enter_context(process(bare_command, bare)))
    start("tailreplay (recording)", tailreplay_proxy(free_port(), up, tmp / "cap1"))
    # The same, copying 10% of the requests to a second fixed server (docs/shadow.md).
    shadow = free_port()
    if have_nginx:
        stack.enter_context(process(nginx(tmp, 1, free_port(), shadow, fixed=shadow), shadow))
    else:
        stack.enter_context(process([py, __file__, "--fixed", str(shadow)], shadow))
    copying = ["--shadow", f"http://127.0.0.1:{shadow}", "--shadow-share", "10%"]
    start(SHADOWING, [*tailreplay_proxy(free_port(), up, tmp / "cap-shadow"), *copying])
    for n, python in enumerate(args.baseline_python):
        # Run from elsewhere: from here, `-m tailreplay` would import this checkout.
        command = tailreplay_proxy(free_port(), up, tmp / f"base{n}", python=python)
        start(f"tailreplay {_version(python)} (recording)", command, tmp)
    if have_nginx:
        port = free_port()
        targets["nginx"] = (port, stack.enter_context(process(nginx(tmp, 1, port, up), port)))
    start("tailreplay --workers 2", tailreplay_proxy(free_port(), up, tmp / "cap2", 2))
    if have_nginx:
        port = free_port()
        nginx2 = stack.enter_context(process(nginx(tmp, 2, port, up), port))
        targets["nginx, 2 workers"] = (port, nginx2)
    return targets


def _version(python: str) -> str:
    """The commit a baseline interpreter's tailreplay was built from (as its
    ``bench/baseline_env.sh`` recorded it), else its path."""
    marker = Path(python).absolute().parents[2] / "COMMIT"
    return marker.read_text().strip() if marker.exists() else python


def sse_runs(args: argparse.Namespace, have_nginx: bool) -> list[tuple[str, float, float]]:
    py = sys.executable
    sse_rows = []
    with tempfile.TemporaryDirectory() as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        up = free_port()
        stack.enter_context(process([py, __file__, "--sse", str(up)], up))
        targets = {"direct": up}
        raw, floor, bare, tr = free_port(), free_port(), free_port(), free_port()
        stack.enter_context(
            process([py, str(ROOT / "bench/raw_forwarder.py"), str(raw), str(up)], raw)
        )
        stack.enter_context(
            process([py, str(ROOT / "bench/aiohttp_floor.py"), str(floor), str(up)], floor)
        )
        stack.enter_context(
            process(
                [py, str(ROOT / "bench/bare_forwarder.py"), str(bare), f"http://127.0.0.1:{up}"],
                bare,
            )
        )
        stack.enter_context(process(tailreplay_proxy(tr, up, tmp / "cap"), tr))
        targets |= {
            "raw asyncio pass-through (floor)": raw,
            "aiohttp server, nothing recorded (floor)": floor,
            "bare forwarder": bare,
            "tailreplay (recording)": tr,
        }
        if have_nginx:
            ng = free_port()
            stack.enter_context(process(nginx(tmp, 1, ng, up), ng))
            targets["nginx"] = ng
        for port in targets.values():
            asyncio.run(ttfts(f"http://127.0.0.1:{port}", 10, 1.0))  # warm-up
        results: dict[str, list[float]] = {name: [] for name in targets}
        for _ in range(args.runs):  # interleaved, as the POST runs
            for name, port in targets.items():
                s = asyncio.run(ttfts(f"http://127.0.0.1:{port}", args.streams, args.seconds))
                results[name] += [statistics.quantiles(s, n=100)[i] for i in (49, 98)]
        for name, values in results.items():
            p50 = statistics.median(values[0::2])
            p99 = statistics.median(values[1::2])
            sse_rows.append((name, p50, p99))
    return sse_rows


def report(
    args: argparse.Namespace,
    rows: list[Row],
    sse_rows: list[tuple[str, float, float]],
) -> None:
    if rows:
        print_post(args, rows)
    if sse_rows:
        print_sse(args, sse_rows)


def print_post(args: argparse.Namespace, rows: list[Row]) -> None:
    by_name = {r[0]: r for r in rows}
    bare_rps = by_name["bare forwarder"][1]
    ours = by_name["tailreplay (recording)"][4]
    print(
        f"wrk -t2 -c50 -d{args.seconds}s, POST chat body; median of {args.runs} runs; "
        "2 cores shared by all; CPU: the target's processes (a proxy and its recorder)"
    )
    print()
    print("| target | requests/s | vs bare forwarder | P50 ms | P99 ms | CPU µs/request |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rps, p50, p99, cpu in rows:
        print(f"| {name} | {rps:,.0f} | {rps / bare_rps:.2f} | {p50:.2f} | {p99:.2f} | {cpu:.0f} |")
    print()
    for name, _, _, _, cpu in rows:
        if name.endswith("(recording)") and name != "tailreplay (recording)":  # a baseline
            print(f"tailreplay (recording) CPU per request / {name}: {ours / cpu:.2f}")
    if SHADOWING in by_name:
        shadowing = by_name[SHADOWING]
        ours_rps = by_name["tailreplay (recording)"][1]
        print(
            f"{SHADOWING} against tailreplay (recording): CPU per request "
            f"{shadowing[4] / ours:.2f}x, throughput {shadowing[1] / ours_rps:.2f}x"
        )
    print()


def print_sse(args: argparse.Namespace, sse_rows: list[tuple[str, float, float]]) -> None:
    print(
        f"SSE: {args.streams} streams always in flight for {args.seconds} s, {SSE_EVENTS} events "
        f"{SSE_GAP_S * 1000:.0f} ms apart; time to first event"
    )
    print()
    print("| target | TTFT P50 ms | TTFT P99 ms | added P50 ms | added P99 ms |")
    print("|---|---:|---:|---:|---:|")
    d50, d99 = sse_rows[0][1], sse_rows[0][2]
    for name, p50, p99 in sse_rows:
        print(f"| {name} | {p50:.2f} | {p99:.2f} | {p50 - d50:+.2f} | {p99 - d99:+.2f} |")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--sse":
        sse_server(int(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "--fixed":
        fixed_server(int(sys.argv[2]))
    else:
        main()
