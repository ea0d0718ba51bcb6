"""The HTTP/1.1 client the proxy and the replayer share (tailreplay/http/client.py)
against HTTP's less common shapes.

Each test puts a real server on 127.0.0.1 behind the proxy — aiohttp where it can
say what is needed, a raw asyncio server where the test needs bytes no framework
would send (a 100 Continue, a body ended by closing, a stale keep-alive
connection, garbage) — and checks what the client of the proxy gets.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import ssl
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
import trustme
from aiohttp import web

from tailreplay.http.client import Origin, UpstreamPool
from tailreplay.sim.server import SimConfig, serve
from tests.fixed_upstream import WORDS, fixed_app
from tests.helpers import metric
from tests.proxy.test_proxy_safety import QUICK
from tests.proxy_helpers import proxy_to, records, serve_app


@asynccontextmanager
async def raw_server(
    answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], object],
) -> AsyncIterator[str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await answer(reader, writer)  # type: ignore[misc]
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


async def get_via_proxy(answer: Callable[..., object], out: Path) -> tuple[int, bytes]:
    """GET /v1/models through a proxy in front of ``raw_server(answer)``."""
    async with (
        raw_server(answer) as upstream,
        proxy_to(upstream, out) as proxy,
        aiohttp.ClientSession() as s,
        s.get(proxy.url + "/v1/models") as r,
    ):
        return r.status, await r.read()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))
    return head


async def test_head_gets_headers_and_no_body_and_the_next_request_works(tmp_path: Path) -> None:
    async def page(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * 1234)

    app = web.Application()
    app.router.add_get("/v1/models", page)  # aiohttp answers HEAD for GET routes
    async with (
        serve_app(app) as upstream,
        proxy_to(upstream, tmp_path / "out") as proxy,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s,
    ):
        async with s.head(proxy.url + "/v1/models") as r:
            assert r.status == 200 and r.headers["Content-Length"] == "1234"
            assert await r.read() == b""
        async with s.get(proxy.url + "/v1/models") as r:
            assert await r.read() == b"x" * 1234


async def test_a_large_upload_streams_through_intact(tmp_path: Path) -> None:
    seen: list[tuple[str | None, str]] = []

    async def upload(request: web.Request) -> web.Response:
        digest = hashlib.sha256()
        async for chunk in request.content.iter_any():
            digest.update(chunk)
        seen.append((request.headers.get("Transfer-Encoding"), digest.hexdigest()))
        return web.json_response({"ok": True})

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/files", upload)
    data = os.urandom(5 << 20)

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(data), 1 << 20):
            yield data[i : i + (1 << 20)]

    async with (
        serve_app(app) as upstream,
        proxy_to(upstream, tmp_path / "out") as proxy,
        aiohttp.ClientSession() as s,
    ):
        async with s.post(proxy.url + "/v1/files", data=data) as r:  # with a length
            assert r.status == 200
        async with s.post(proxy.url + "/v1/files", data=chunks()) as r:  # chunked
            assert r.status == 200
    expected = hashlib.sha256(data).hexdigest()
    assert seen == [(None, expected), ("chunked", expected)]


async def test_a_slow_reader_holds_the_upstream_back(tmp_path: Path) -> None:
    # The upstream writes 64 MiB as fast as it can; the client reads 1 MiB every
    # 20 ms. The proxy must pause the upstream rather than buffer the difference:
    # the upstream can only finish once the client has read most of the body
    # (socket buffers on the way hold at most ~20 MiB); without the pause it would
    # finish at once. And nothing is lost or repeated across pauses.
    data = os.urandom(64 << 20)
    upstream_done: list[float] = []

    async def big(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for i in range(0, len(data), 256 << 10):
            await resp.write(data[i : i + (256 << 10)])
        await resp.write_eof()
        upstream_done.append(time.monotonic())
        return resp

    app = web.Application()
    app.router.add_get("/v1/big", big)
    got = bytearray()
    read_at: list[tuple[float, int]] = []
    async with (
        serve_app(app) as upstream,
        proxy_to(upstream, tmp_path / "out") as proxy,
        aiohttp.ClientSession(read_bufsize=1 << 16) as s,
        s.get(proxy.url + "/v1/big") as r,
    ):
        async for chunk in r.content.iter_chunked(1 << 20):
            got += chunk
            read_at.append((time.monotonic(), len(got)))
            await asyncio.sleep(0.02)
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    read_when_upstream_done = max(n for t, n in read_at if t <= upstream_done[0])
    assert read_when_upstream_done >= len(data) // 2
    (rec,) = records(tmp_path / "out")
    assert rec.status == 200 and rec.error is None


async def test_informational_answers_are_skipped(tmp_path: Path) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.read()  # until the proxy closes

    assert await get_via_proxy(answer, tmp_path / "out") == (200, b"ok")


async def test_a_body_ended_by_closing_arrives_whole(tmp_path: Path) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        for part in (b"first ", b"second ", b"third"):
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(0.02)

    assert await get_via_proxy(answer, tmp_path / "out") == (200, b"first second third")
    (rec,) = records(tmp_path / "out")
    assert rec.error is None and rec.bytes_out == len(b"first second third")


async def test_a_stale_keepalive_connection_is_retried_on_a_new_one(tmp_path: Path) -> None:
    # The upstream answers one request per connection while announcing keep-alive,
    # then closes as the next request arrives: the race between an idle close and
    # reuse, made to happen every time.
    connections = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")  # the next request: close without answering

    async with (
        raw_server(answer) as upstream,
        proxy_to(upstream, tmp_path / "out") as proxy,
        aiohttp.ClientSession() as s,
    ):
        for _ in range(3):
            async with s.post(proxy.url + "/v1/embeddings", json={"input": "x"}) as r:
                assert (r.status, await r.read()) == (200, b"ok")
    assert connections == 3


async def test_garbage_from_the_upstream_is_a_502(tmp_path: Path) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"this is not HTTP\r\n\r\n")
        await writer.drain()

    status, body = await get_via_proxy(answer, tmp_path / "out")
    assert status == 502 and json.loads(body)["error"]["type"] == "bad_response"


async def test_a_malformed_chunk_mid_body_cuts_the_client_and_is_recorded_why(
    tmp_path: Path,
) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\nzz\r\n")
        await writer.drain()
        await asyncio.sleep(5)  # the proxy cuts the exchange; it does not wait for this

    with pytest.raises(aiohttp.ClientPayloadError):
        await get_via_proxy(answer, tmp_path / "out")
    (rec,) = records(tmp_path / "out")
    assert (rec.status, rec.error) == (200, "bad_response")


async def test_a_client_that_hangs_up_cancels_the_upstream_request(tmp_path: Path) -> None:
    out = tmp_path / "out"
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": 500,
        "ignore_eos": True,
    }
    async with serve(SimConfig(profile=QUICK, port=0)) as sim, proxy_to(sim, out) as proxy:
        async with (
            aiohttp.ClientSession() as s,
            s.post(proxy.url + "/v1/chat/completions", json=body) as r,
        ):
            await r.content.readline()  # the stream has started
        # Leaving the block closed the connection mid-stream.
        for _ in range(100):
            if await metric(sim, "tailreplay_sim_client_aborts_total") == 1:
                break
            await asyncio.sleep(0.05)
        assert await metric(sim, "tailreplay_sim_client_aborts_total") == 1
    (rec,) = records(out)
    assert rec.error == "client_abort" and rec.status == 200


async def test_idle_connections_are_reused_then_closed_after_the_keepalive() -> None:
    opened, closed = 0, 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal opened, closed
        opened += 1
        try:
            while True:
                await read_request(reader)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except asyncio.IncompleteReadError:
            closed += 1

    pool = UpstreamPool(timeout_s=5, connect_timeout_s=5, keepalive_s=0.4)
    async with raw_server(answer) as upstream:
        port = int(upstream.rsplit(":", 1)[1])
        origin = Origin("http", "127.0.0.1", port)
        for _ in range(3):
            response = await pool.send(origin, "GET", "/v1/models", [], None)
            got = bytearray()

            def take(chunk: bytes, got: bytearray = got) -> bool:
                got += chunk
                return True

            response.start(take)
            assert await response.wait() and got == b"ok"
            response.close()
        assert (opened, closed) == (1, 0)  # one connection, kept
        await asyncio.sleep(1.0)  # past the keep-alive (swept every 0.1 s)
        assert (opened, closed) == (1, 1)
        await pool.close()


async def test_a_stale_connection_is_retried_on_a_new_one_not_another_idle_one() -> None:
    """An upstream that answers once a connection and drops the next request unread:
    with two such connections idle, the request that finds the first stale is sent
    again on a connection of its own, and answered."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")  # the next request: close without answering

    async def get(pool: UpstreamPool, origin: Origin) -> int:
        response = await pool.send(origin, "GET", "/v1/models", [], None)
        response.start(lambda chunk: True)
        await response.wait()
        response.close()
        return response.status

    pool = UpstreamPool(timeout_s=5, connect_timeout_s=5)
    async with raw_server(answer) as upstream:
        origin = Origin("http", "127.0.0.1", int(upstream.rsplit(":", 1)[1]))
        assert await asyncio.gather(get(pool, origin), get(pool, origin)) == [200, 200]
        assert pool.idle_count(origin) == 2
        assert await get(pool, origin) == 200
        await pool.close()


@asynccontextmanager
async def https_upstream(ca: trustme.CA) -> AsyncIterator[str]:
    """The deterministic OpenAI-style upstream over TLS, its certificate from ``ca``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    runner = web.AppRunner(fixed_app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
    try:
        yield f"https://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_an_https_upstream_is_verified_against_the_trust_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trusted, stranger = trustme.CA(), trustme.CA()
    ca_file = tmp_path / "ca.pem"
    trusted.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))  # the system trust store, for this test
    body = {"model": "fixed", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with (
        https_upstream(trusted) as good,
        https_upstream(stranger) as bad,
        proxy_to(good, tmp_path / "good") as proxy,
        proxy_to(bad, tmp_path / "bad") as refusing,
        aiohttp.ClientSession() as s,
    ):
        async with s.post(proxy.url + "/v1/chat/completions", json=body) as r:
            assert r.status == 200
            streamed = await r.read()
        async with s.post(refusing.url + "/v1/chat/completions", json=body) as r:
            assert r.status == 502
            error = (await r.json())["error"]
    assert streamed.count(b"data: ") == len(WORDS) + 2  # the words, the stop chunk, [DONE]
    assert error["type"] == "upstream_connect" and "CERTIFICATE_VERIFY_FAILED" in error["message"]


async def test_a_client_that_never_reads_is_cut_off_at_the_timeout(tmp_path: Path) -> None:
    chunk = os.urandom(256 << 10)

    async def endless(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for _ in range(1024):  # 256 MiB at most; the proxy stops reading long before
            await resp.write(chunk)
        return resp

    app = web.Application()
    app.router.add_get("/v1/big", endless)
    out = tmp_path / "out"
    async with serve_app(app) as upstream, proxy_to(upstream, out, timeout_s=1.0) as proxy:
        port = int(proxy.url.rsplit(":", 1)[1])
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/big HTTP/1.1\r\nHost: x\r\n\r\n")  # and never read
        deadline = time.monotonic() + 15
        while not records(out):
            assert time.monotonic() < deadline, "the stalled client was never cut off"
            await asyncio.sleep(0.1)
        writer.close()
    (rec,) = records(out)
    assert rec.status == 200 and rec.error == "upstream_timeout"
