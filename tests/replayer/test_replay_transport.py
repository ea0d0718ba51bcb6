"""The replayer's transport on the shared HTTP/1.1 client (tailreplay/http/client.py):
TLS verified against the trust store, --connections as a hard cap, compressed streams
read, and headers that could split a request refused before anything is sent."""

from __future__ import annotations

import asyncio
import gc
import gzip
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import trustme
from aiohttp import web

from tailreplay.http.client import Origin, UpstreamError, UpstreamPool
from tailreplay.replayer.request import RequestSpec
from tailreplay.replayer.transport import HttpTransport
from tailreplay.traces.archive.reader import ArchiveReader
from tests.core.test_proxy_upstream import https_upstream
from tests.fixed_upstream import WORDS
from tests.helpers import REPO
from tests.proxy_helpers import serve_app

CHAT = json.dumps({"model": "fixed", "messages": [{"role": "user", "content": "hi"}],
                   "stream": True}).encode()  # fmt: skip


def _spec(path: str = "/v1/chat/completions", body: bytes | None = CHAT) -> RequestSpec:
    return RequestSpec("POST" if body else "GET", path, body, stream=True, prompt_tokens=None)


async def test_an_https_target_is_verified_against_the_trust_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trusted, stranger = trustme.CA(), trustme.CA()
    ca_file = tmp_path / "ca.pem"
    trusted.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    async with https_upstream(trusted) as good, https_upstream(stranger) as bad:
        ok, refused = (HttpTransport(u, connections=2, timeout_s=10) for u in (good, bad))
        try:
            streamed = await ok.send(
                _spec(), {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
            )
            failed = await refused.send(_spec(), {})
        finally:
            await ok.close()
            await refused.close()
    assert streamed.status == 200 and streamed.error is None
    assert streamed.completion_tokens == len(WORDS) and streamed.ttfb_ns is not None
    assert failed.status == 0 and failed.error == "connect"


@pytest.mark.parametrize(("connections", "expected"), [(3, 3), (0, 20)])
async def test_connections_caps_the_connections_open_at_once(
    connections: int, expected: int
) -> None:
    in_handler = peak = 0
    peers: set[object] = set()

    async def slow(request: web.Request) -> web.Response:
        nonlocal in_handler, peak
        assert request.transport is not None
        peers.add(request.transport.get_extra_info("peername"))
        in_handler += 1
        peak = max(peak, in_handler)
        await asyncio.sleep(0.05)
        in_handler -= 1
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_get("/v1/models", slow)
    async with serve_app(app) as url:
        transport = HttpTransport(url, connections=connections, timeout_s=10)
        try:
            outs = await asyncio.gather(*(transport.send(_spec("/v1/models", None), {})
                                          for _ in range(20)))  # fmt: skip
        finally:
            await transport.close()
    assert [o.status for o in outs] == [200] * 20
    # at most --connections, kept alive; 0 is no limit: one for each request in flight
    assert peak == expected and len(peers) == expected


async def test_a_compressed_stream_is_inflated_and_its_tokens_counted() -> None:
    events = [b'data: {"choices":[{"delta":{"content":"w%d"}}]}\n\n' % i for i in range(5)]
    events.append(b"data: [DONE]\n\n")
    seen: dict[str, str] = {}

    async def chat(request: web.Request) -> web.StreamResponse:
        seen.update(request.headers)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Content-Encoding": "gzip"})  # fmt: skip
        await resp.prepare(request)
        await resp.write(gzip.compress(b"".join(events)))
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with serve_app(app) as url:
        transport = HttpTransport(url + "/v1", connections=1, timeout_s=10)
        try:
            out = await transport.send(_spec(), {"Accept-Encoding": "gzip", "Host": "evil:1"})
        finally:
            await transport.close()
    assert out.status == 200 and out.error is None and out.completion_tokens == 5
    assert out.tokens_source == "estimate"
    assert seen["User-Agent"].startswith("tailreplay/")
    assert seen["Host"].startswith("127.0.0.1:")  # the client's own, never one from --header


def test_a_header_that_would_split_the_request_is_refused(tmp_path: Path) -> None:
    archive = REPO / "traces/peak.msgpack"
    done = subprocess.run(
        [sys.executable, "-m", "tailreplay", "replay", "--target", "http://127.0.0.1:9",
         "--header", "X-Team: a\r\nX-Evil: 1", "--out", str(tmp_path / "r.msgpack"),
         str(archive)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "Error: invalid --header: the value holds a control character"
    ]
    assert not (tmp_path / "r.msgpack").exists()


async def test_a_woken_waiter_that_leaves_passes_its_connection_on() -> None:
    """At the cap, a request woken for a released connection but cancelled before it
    ran (a recorded client's abort) hands the connection to the next in line."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    async with serve_app(app) as url:
        port = int(url.rsplit(":", 1)[1])
        pool = UpstreamPool(timeout_s=5, connect_timeout_s=5, max_connections=1)
        origin = Origin("http", "127.0.0.1", port)
        try:
            first = await pool.send(origin, "GET", "/v1/models", [], None)
            first.start(lambda _: True)
            assert await first.wait()
            second = asyncio.create_task(pool.send(origin, "GET", "/v1/models", [], None))
            third = asyncio.create_task(pool.send(origin, "GET", "/v1/models", [], None))
            await asyncio.sleep(0.05)  # both wait for the one connection, second first
            first.close()  # released: the second is woken...
            second.cancel()  # ...and leaves before it could take it
            began = time.monotonic()
            got = await asyncio.wait_for(third, 4)
            assert got.status == 200 and time.monotonic() - began < 1.0
            got.close()
        finally:
            await pool.close()


async def test_a_request_past_the_pools_timeout_fails_and_the_rest_are_untouched() -> None:
    """The pool's one deadline watch: an answer that stalls mid-body fails as a timeout
    soon after ``timeout_s``, while the requests before and after it are answered."""

    async def stalls(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b"part of a body")
        await asyncio.sleep(5)
        return resp

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_get("/stall", stalls)
    app.router.add_get("/v1/models", models)
    async with serve_app(app) as url:
        origin = Origin("http", "127.0.0.1", int(url.rsplit(":", 1)[1]))
        pool = UpstreamPool(timeout_s=0.5, connect_timeout_s=5)

        async def fetch(target: str) -> tuple[str, float]:
            began = time.monotonic()
            try:
                resp = await pool.send(origin, "GET", target, [], None)
                resp.start(lambda _: True)
                try:
                    await resp.wait()
                finally:
                    resp.close()
            except UpstreamError as exc:
                return exc.kind, time.monotonic() - began
            return str(resp.status), time.monotonic() - began

        try:
            assert (await fetch("/v1/models"))[0] == "200"
            stalled = asyncio.create_task(fetch("/stall"))
            await asyncio.sleep(0.3)
            assert (await fetch("/v1/models"))[0] == "200"  # answered beside the stalled one
            kind, took = await stalled
            # Fails after its 0.5 s, at most a watch's tick (0.05 s here) late on an idle
            # machine; the bound leaves room for a busy one, far short of the 5 s stall.
            assert kind == "upstream_timeout" and 0.5 <= took < 2.5
            assert (await fetch("/v1/models"))[0] == "200"
        finally:
            await pool.close()


CHAT_REPLY = (
    b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":'
    b'"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,'
    b'"completion_tokens":1,"total_tokens":6}}'
)


def _one_at_a_time_target() -> tuple[str, object]:
    """Python's http.server: one connection at a time, HTTP/1.0, closed after each answer."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(CHAT_REPLY)))
            self.end_headers()
            self.wfile.write(CHAT_REPLY)

        def log_message(self, *args: object) -> None:
            pass

    class Server(http.server.HTTPServer):
        accepted = 0

        def get_request(self) -> tuple[object, object]:
            Server.accepted += 1
            return super().get_request()  # type: ignore[return-value]

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server


def test_hostile_values_from_a_target_are_kept_replaced_and_every_result_written(
    tmp_path: Path,
) -> None:
    """A target's answers carry what no archive can hold: a usage count past 64 bits, a
    Retry-After of 30 digits, an error message with a JSON escape of a lone surrogate.
    Every request still gets its result, with those values read as what they mean."""
    import http.server
    import threading

    from tests.helpers import chat_archive

    answered = 0

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            nonlocal answered
            self.rfile.read(int(self.headers.get("content-length", 0)))
            answered += 1
            refused = answered % 4 == 3  # the preflight's answer (the first) is a 200
            body = (b'{"error":{"message":"slow down \\ud800"}}' if refused else
                    b'{"choices":[{"finish_reason":"stop"}],"usage":{"prompt_tokens":'
                    b'100000000000000000000,"completion_tokens":3}}')  # fmt: skip
            self.send_response(429 if refused else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if refused:
                self.send_header("Retry-After", "9" * 30)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 20, gap_ms=5, seed=3)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tailreplay", "replay", "--target",
             f"http://127.0.0.1:{server.server_address[1]}", "--timeout", "5s",
             "--out", str(tmp_path / "r.msgpack"), str(archive)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    results = list(ArchiveReader([tmp_path / "r.msgpack"], order="file"))
    assert len(results) == 20
    refused = [r for r in results if r.status == 429]
    assert len(refused) == 5
    assert {(r.error_message, r.retry_after_ms) for r in refused} == {("slow down ?", 10**12)}
    # A count past 64 bits is no count: the usage is not taken (neither of its counts).
    ok = [r for r in results if r.status == 200]
    assert len(ok) == 15 and all(r.error is None for r in ok)
    assert all(r.input_tokens is None and r.output_tokens is None for r in ok)


def test_a_target_that_serves_one_connection_at_a_time_gets_every_request(
    tmp_path: Path,
) -> None:
    """No idle connections are opened ahead where the preflight's was not kept alive: such
    a target would sit reading one of them while the requests wait on the others."""
    from tests.helpers import chat_archive

    url, server = _one_at_a_time_target()
    archive = tmp_path / "a.msgpack"
    chat_archive(archive, 50, gap_ms=5, seed=3)
    # A common start 6 s ahead (as shards take): connects that stall before it (the
    # target's backlog full of idle connections) would make the first requests late.
    start = time.time() + 6
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tailreplay", "replay", "--target", url, "--timeout", "5s",
             "--start-at", f"{start:.3f}",
             "--json", str(tmp_path / "s.json"), "--out", str(tmp_path / "r.msgpack"),
             str(archive)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        server.shutdown()  # type: ignore[attr-defined]
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["completed"] == 50 and not summary["errors"]
    # None waited for the 5 s timeout, nor left that late (the bound leaves a busy
    # machine room, and is half of what a request held behind an idle connection waits).
    assert summary["latency_ms"]["max"] < 2500
    assert summary["lag_ms"]["max"] < 2500
    assert server.accepted == 51  # type: ignore[attr-defined]  # the preflight's and each one's


async def test_the_warm_up_opens_connections_up_to_the_number_with_no_request() -> None:
    """Against a keep-alive target, after one request: as many connections as asked in
    all (the request's own counted), and not one more request."""
    accepted, requests = [], []

    async def chat(request: web.Request) -> web.Response:
        requests.append(request.path)
        await request.read()
        return web.Response(body=CHAT_REPLY, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    transport = HttpTransport(f"http://127.0.0.1:{port}", connections=100, timeout_s=10)
    try:
        spec = RequestSpec("POST", "/v1/chat/completions", b"{}", stream=False, prompt_tokens=None)
        await transport.send(spec, {"Content-Type": "application/json"})
        await transport.warm(8)
        await asyncio.sleep(0.1)
        accepted.append(len(runner.server.connections))  # type: ignore[union-attr]
    finally:
        await transport.close()
        await runner.cleanup()
    assert accepted == [8] and requests == ["/v1/chat/completions"]


async def test_an_answered_request_leaves_no_garbage_for_the_collector() -> None:
    # Garbage in a reference cycle waits for the cyclic collector, whose walks stall
    # the loop while requests are due; freed by reference counts, it costs nothing.
    async def chat(request: web.Request) -> web.StreamResponse:
        if not (await request.json())["stream"]:
            return web.json_response({"choices": [], "usage": {"prompt_tokens": 1,
                                                              "completion_tokens": 2}})  # fmt: skip
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for word in WORDS:
            await resp.write(b'data: {"choices":[{"delta":{"content":"%s"}}]}\n\n' % word.encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    plain = json.dumps({"model": "m", "messages": [], "stream": False}).encode()
    async with serve_app(app) as url:
        transport = HttpTransport(url, connections=2, timeout_s=10)
        try:
            gc.collect()
            gc.disable()
            gc.set_debug(gc.DEBUG_SAVEALL)
            outs = [await transport.send(_spec(body=body), {}) for body in (CHAT, plain) * 10]
            gc.collect()
            left = Counter(type(o).__name__ for o in gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
            await transport.close()
    assert [o.status for o in outs] == [200] * 20
    assert outs[0].completion_tokens == len(WORDS) and outs[1].completion_tokens == 2
    ours = {"UpstreamResponse", "_Reader", "Outcome", "ResponseTap", "StreamTimeline"}
    assert not {name: n for name, n in left.items() if name in ours}


async def test_the_heads_on_the_wire_carry_the_runs_headers_and_each_its_own_trace() -> None:
    seen: list[tuple[str, list[tuple[str, str]]]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append((request.method, list(request.headers.items())))
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    app.router.add_get("/v1/models", answer)
    run = {"Authorization": "Bearer replay", "TraceParent": "00-given", "connection": "close"}
    parents = [f"00-{i:032x}-{i:016x}-01" for i in range(1, 4)]
    async with serve_app(app) as url:
        transport = HttpTransport(url, connections=1, timeout_s=10)
        try:
            for spec, parent in zip([_spec(), _spec("/v1/models", None), _spec()], parents,
                                    strict=True):  # fmt: skip
                assert (await transport.send(spec, run, parent)).status == 200
            typed = await transport.send(_spec(), {"content-type": "application/x-ndjson"})
        finally:
            await transport.close()
    assert typed.status == 200
    for (method, headers), parent in zip(seen, [*parents, None], strict=True):
        names = [k.lower() for k, _ in headers]
        assert len(names) == len(set(names))  # nothing twice: one trace context, one type
        given = {k.lower(): v for k, v in headers}
        assert given.get("traceparent") == parent  # the request's own, never --header's
        assert given["user-agent"].startswith("tailreplay/")
        assert given.get("connection") != "close"  # the client's own framing
        if parent is None:
            assert given["content-type"] == "application/x-ndjson"  # a given type stands
        elif method == "POST":
            assert given["authorization"] == "Bearer replay"
            assert given["content-type"] == "application/json"
            assert given["content-length"] == str(len(CHAT))
        else:
            assert "content-type" not in given and "content-length" not in given
