"""Secrets never reach disk; the proxy is never an open proxy; failures are clean."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import socket
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tailreplay.proxy.forwarding import forwarding
from tailreplay.proxy.headers import HOP_BY_HOP, request_headers_upstream
from tailreplay.sim.faults import Faults
from tailreplay.sim.profiles import PROFILES
from tailreplay.sim.server import SimConfig, serve
from tests.helpers import metric
from tests.proxy_helpers import proxy_to, records, serve_app

QUICK = PROFILES["default"].with_overrides(
    decode_base_ms=2.0, decode_per_seq_ms=0.0, prefill_base_ms=1.0, output_mean=10.0
)
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


@pytest.mark.parametrize("bodies", ["none", "redacted"])
async def test_secrets_never_reach_disk(tmp_path: Path, bodies: str) -> None:
    values = {name: secrets.token_urlsafe(24) for name in ("bearer", "api", "xapi", "cookie")}
    headers = {
        "Authorization": f"Bearer {values['bearer']}",
        "api-key": values["api"],
        "x-api-key": values["xapi"],
        "Cookie": f"session={values['cookie']}",
    }
    out = tmp_path / "out"
    async with (
        serve(SimConfig(profile=QUICK, port=0)) as sim,
        proxy_to(sim, out, bodies=bodies) as proxy,
        aiohttp.ClientSession() as s,
    ):
        for stream in (False, True):
            body = {**CHAT, "stream": stream}
            async with s.post(proxy.url + "/v1/chat/completions", json=body, headers=headers) as r:
                assert r.status == 200
                await r.read()
    files = [p for p in out.rglob("*") if p.is_file()]
    assert files
    for path in files:
        data = path.read_bytes()
        for value in values.values():
            assert value.encode() not in data, f"a secret reached {path.name}"
        assert (path.stat().st_mode & 0o777) == 0o600
    (rec, _) = records(out)
    recorded = dict(rec.req_headers or [])
    assert recorded["authorization"].startswith("fp:") and recorded["cookie"].startswith("fp:")


@pytest.mark.parametrize("name", sorted(HOP_BY_HOP))
def test_each_hop_by_hop_header_is_stripped(name: str) -> None:
    from multidict import CIMultiDict, CIMultiDictProxy

    incoming = CIMultiDictProxy(
        CIMultiDict({name: "x", "Connection": "X-Custom", "X-Custom": "1", "A": "b", "Host": "h"})
    )
    fwd = forwarding(incoming, peer="10.0.0.1", trusted=False, scheme="http", host="h")
    out = dict(request_headers_upstream(incoming, fwd))
    assert name not in {k.lower() for k in out}
    assert "x-custom" not in {k.lower() for k in out}  # listed in Connection: hop-by-hop too
    assert "host" not in {k.lower() for k in out}
    assert out["A"] == "b" and out["X-Forwarded-For"] == "10.0.0.1"
    assert out["X-Forwarded-Host"] == "h" and out["X-Forwarded-Proto"] == "http"


async def _raw_request(port: int, head: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()


async def test_never_an_open_proxy(tmp_path: Path) -> None:
    hits: list[str] = []

    async def victim(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="you reached the victim")

    victim_app = web.Application()
    victim_app.router.add_route("*", "/{tail:.*}", victim)
    async with serve_app(victim_app) as victim_url, serve(SimConfig(profile=QUICK, port=0)) as sim:
        vport = int(victim_url.rsplit(":", 1)[1])
        async with proxy_to(sim, tmp_path / "out") as proxy:
            port = int(proxy.url.rsplit(":", 1)[1])
            target = f"127.0.0.1:{vport}"
            attempts = {
                "absolute-form": f"GET http://{target}/x HTTP/1.1\r\nHost: {target}\r\n\r\n",
                "connect": f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n",
                "host-header": f"GET /v1/models HTTP/1.1\r\nHost: {target}\r\n\r\n",
                "double-slash": f"GET //{target}/x HTTP/1.1\r\nHost: {target}\r\n\r\n",
                "forwarded-host": (
                    f"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Forwarded-Host: {target}\r\n\r\n"
                ),
                "at-sign": f"GET @{target}/x HTTP/1.1\r\nHost: x\r\n\r\n",
            }
            answers = {k: await _raw_request(port, v.encode()) for k, v in attempts.items()}
    assert hits == []
    assert answers["absolute-form"].startswith(b"HTTP/1.1 400")
    assert answers["connect"].startswith(b"HTTP/1.1 400")
    assert answers["host-header"].startswith(b"HTTP/1.1 200")  # served by the configured upstream
    assert b"victim" not in b"".join(answers.values())


async def test_upstream_down_is_502_within_a_second(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, never listening: refused
        out = tmp_path / "out"
        async with proxy_to(dead, out) as proxy, aiohttp.ClientSession() as session:
            t0 = time.monotonic()
            async with session.post(proxy.url + "/v1/chat/completions", json=CHAT) as r:
                body = await r.json()
            elapsed = time.monotonic() - t0
    assert r.status == 502 and body["error"]["type"] == "upstream_connect"
    assert body["error"]["message"] == "cannot connect to the upstream: Connection refused"
    assert elapsed < 1.0
    (rec,) = records(out)
    assert rec.status == 502 and rec.error == "upstream_connect"


async def test_upstream_stall_beyond_timeout_is_504(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stalling = SimConfig(profile=QUICK, port=0, faults=Faults(stall_ms=3000))
    async with (
        serve(stalling) as sim,
        proxy_to(sim, out, timeout_s=0.5) as proxy,
        aiohttp.ClientSession() as s,
        s.post(proxy.url + "/v1/chat/completions", json=CHAT) as r,
    ):
        assert r.status == 504
        assert (await r.json())["error"]["type"] == "upstream_timeout"
    (rec,) = records(out)
    assert rec.status == 504 and rec.error == "upstream_timeout"


async def test_upstream_reset_mid_stream_is_recorded(tmp_path: Path) -> None:
    out = tmp_path / "out"
    resetting = SimConfig(profile=QUICK, port=0, faults=Faults(reset_rate=1.0, seed=2))
    body = {**CHAT, "stream": True, "max_tokens": 50, "ignore_eos": True}
    async with serve(resetting) as sim, proxy_to(sim, out) as proxy, aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientError):
            async with s.post(proxy.url + "/v1/chat/completions", json=body) as r:
                await r.read()
    (rec,) = records(out)
    assert rec.status == 200 and rec.error == "upstream_reset"


async def test_a_failing_writer_fails_no_request(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # Small files, so the writer keeps opening new ones; then the directory goes away
    # (an unmounted volume): every later open fails, as on a dead disk.
    async with (
        serve(SimConfig(profile=QUICK, port=0)) as sim,
        proxy_to(sim, out, rotate_bytes=2_000) as proxy,
    ):
        statuses = []
        async with aiohttp.ClientSession() as s:
            for i in range(60):
                if i == 10:
                    await asyncio.sleep(0.3)  # the first records reach the disk
                    shutil.rmtree(out)
                async with s.post(proxy.url + "/v1/chat/completions", json=CHAT) as r:
                    await r.read()
                    statuses.append(r.status)
            deadline = time.monotonic() + 10
            while await metric(proxy.admin_url, "tailreplay_proxy_records_dropped_total") == 0:
                assert time.monotonic() < deadline, "no drop was ever counted"
                await asyncio.sleep(0.1)
        assert statuses == [200] * 60
        assert await metric(proxy.admin_url, "tailreplay_proxy_requests_total") == 60


async def test_body_over_max_is_413(tmp_path: Path) -> None:
    async with (
        serve(SimConfig(profile=QUICK, port=0)) as sim,
        proxy_to(sim, tmp_path / "o", max_body=1000) as proxy,
    ):
        big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
        async with (
            aiohttp.ClientSession() as s,
            s.post(proxy.url + "/v1/chat/completions", json=big) as r,
        ):
            assert r.status == 413


async def test_upstream_sees_the_clients_headers_and_nothing_of_aiohttps(tmp_path: Path) -> None:
    seen: list[dict[str, str]] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/embeddings", echo)
    async with serve_app(app) as upstream, proxy_to(upstream, tmp_path / "out") as proxy:
        port = int(proxy.url.rsplit(":", 1)[1])
        body = b'{"model":"m","input":"x"}'
        head = (
            b"POST /v1/embeddings HTTP/1.1\r\nHost: h\r\nX-Custom: 1\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(body)
            + body
        )
        answer = await _raw_request(port, head)
    assert answer.startswith(b"HTTP/1.1 200")
    (headers,) = seen
    # No User-Agent, Accept, Accept-Encoding (a compressed reply the client never
    # asked for) or Content-Type added on the way.
    assert {k.lower() for k in headers} == {
        "host", "x-custom", "content-length", "x-forwarded-for", "x-forwarded-proto",
        "x-forwarded-host", "traceparent",
    }  # fmt: skip
