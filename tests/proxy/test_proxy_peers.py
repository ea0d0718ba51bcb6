"""Slow senders just above the minimum pace, and reconnect storms, cannot lock normal
clients out: at the cap the slowest body makes room whatever its pace, one peer holds
at most its share, and a storming peer pushes nobody out. Real sockets on loopback;
attackers come from their own addresses (127.0.0.2 and up: Linux routes all of
127.0.0.0/8 to lo), normal clients from 127.0.0.1."""

from __future__ import annotations

import asyncio
import ipaddress
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
from aiohttp import web

from tailreplay.proxy.forwarding import TrustedProxies
from tailreplay.proxy.peers import STORM_BURST, PeerLimits, peer_cap
from tests.helpers import metric
from tests.proxy_helpers import held_upstream, proxy_to, serve_app, start_proxy_process
from tests.shadow_helpers import stop_proxy

HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 10000000\r\n\r\n"
)


async def _sender(
    port: int, source: str, stop: asyncio.Event, rate: int, lifetime_s: float = math.inf
) -> None:
    """One attacker from ``source``, until ``stop`` is set: a 10 MB body declared,
    ``rate`` bytes a second sent (in tenths of a second); again as soon as it is
    closed, or once it has lived ``lifetime_s`` (so that it is never older than any
    fixed age)."""
    piece = b" " * max(rate // 10, 1)
    while not stop.is_set():
        until = time.monotonic() + lifetime_s
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=(source, 0)
            )
        except OSError:
            await asyncio.sleep(0.01)
            continue
        try:
            writer.write(HEAD)
            while time.monotonic() < until and not stop.is_set() and not reader.at_eof():
                writer.write(piece)
                await writer.drain()
                try:  # closed (evicted, 503) or not, a tenth of a second passes
                    if await asyncio.wait_for(reader.read(65536), 0.1) == b"":
                        break
                except TimeoutError:
                    continue
        except OSError:
            pass  # reset by the proxy: closed all the same
        finally:
            writer.close()


async def _normal(
    url: str, stop_at: float, every_s: float, at_least: int = 20
) -> tuple[list[int], list[str]]:
    """A normal client: a request every ``every_s`` on a new connection, each given
    5 s, until ``stop_at`` and ``at_least`` requests made (a busy machine answers
    fewer in the time); the statuses (0: no answer) and what failed."""
    statuses: list[int] = []
    failures: list[str] = []
    timeout = aiohttp.ClientTimeout(total=5)
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as s:
        while time.monotonic() < stop_at or len(statuses) < at_least:
            began = time.monotonic()
            try:
                async with s.post(url, json={"model": "m"}, timeout=timeout) as r:
                    await r.read()
                    statuses.append(r.status)
            except (aiohttp.ClientError, TimeoutError) as exc:
                statuses.append(0)
                failures.append(repr(exc))
            await asyncio.sleep(max(every_s - (time.monotonic() - began), 0))
    return statuses, failures


@asynccontextmanager
async def _upstream() -> AsyncIterator[str]:
    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"choices": [{"message": {"content": "ok"}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    async with serve_app(app) as url:
        yield url


async def _attacked(
    tmp_path: Path,
    cap: int,
    sources: list[str],
    rate: int,
    settle_s: float,
    lifetime_s: float = math.inf,
) -> tuple[list[int], list[str], dict[str, float]]:
    """A proxy at ``--max-connections cap`` with one sender per entry of ``sources``;
    once they hold its slots (``settle_s``), a normal client for 8 s and 20 requests at
    least, the senders attacking until it is done."""
    names = ("evicted", "slow_bodies_evicted", "refused", "peer_refused", "storms_refused")
    async with (
        _upstream() as upstream,
        proxy_to(upstream, tmp_path / "o", max_connections=cap) as proxy,
    ):
        port = int(proxy.url.rsplit(":", 1)[1])
        stop = asyncio.Event()
        senders = [asyncio.ensure_future(_sender(port, a, stop, rate, lifetime_s)) for a in sources]
        await asyncio.sleep(settle_s)
        statuses, failures = await _normal(
            proxy.url + "/v1/chat/completions", time.monotonic() + 8, every_s=0.25
        )
        stop.set()
        await asyncio.wait_for(asyncio.gather(*senders), 30)
        counts = {
            n: await metric(proxy.admin_url, f"tailreplay_proxy_connections_{n}_total")
            for n in names
        }
    return statuses, failures, counts


async def test_senders_just_above_the_floor_cannot_lock_clients_out(tmp_path: Path) -> None:
    """20 connections from 20 addresses sending their bodies at 300 B/s (above the
    240 B/s floor, so never answered 408) hold every slot of --max-connections 20; a
    normal client still has 95% of its requests served: at the cap, the slowest body
    makes room, whatever its pace."""
    sources = [f"127.0.0.{2 + i}" for i in range(20)]
    statuses, failures, counts = await _attacked(tmp_path, 20, sources, 300, settle_s=2.0)
    served = statuses.count(200) / len(statuses)
    assert len(statuses) >= 20 and served >= 0.95, (statuses, failures, counts)
    assert counts["slow_bodies_evicted"] >= statuses.count(200) * 0.9, counts


async def test_bodies_that_reconnect_before_any_age_cannot_lock_clients_out(
    tmp_path: Path,
) -> None:
    """20 addresses each declaring a 10 MB body, sending 40 KB/s and reconnecting every
    0.9 s (younger than any fixed age a guard might wait for), at --max-connections
    20: at the cap, the body that needs the longest to arrive makes room, young or
    not; a normal client still has 95% of its requests served."""
    sources = [f"127.0.0.{2 + i}" for i in range(20)]
    statuses, failures, counts = await _attacked(
        tmp_path, 20, sources, 40_000, settle_s=2.0, lifetime_s=0.9
    )
    served = statuses.count(200) / len(statuses)
    assert len(statuses) >= 20 and served >= 0.95, (statuses, failures, counts)
    assert counts["slow_bodies_evicted"] >= statuses.count(200) * 0.9, counts


async def test_a_reconnect_storm_cannot_lock_clients_out(tmp_path: Path) -> None:
    """200 tricklers (300 B/s) from ten addresses, reconnecting at once whenever
    closed, at --max-connections 100: the storm is refused (it may push out no body
    and no newcomer), the slowest bodies make room for a normal client, 95% served."""
    sources = [f"127.0.0.{2 + i % 10}" for i in range(200)]
    statuses, failures, counts = await _attacked(tmp_path, 100, sources, 300, settle_s=3.0)
    served = statuses.count(200) / len(statuses)
    assert len(statuses) >= 20 and served >= 0.95, (statuses, failures, counts)
    assert counts["storms_refused"] > 0 and counts["slow_bodies_evicted"] > 0, counts


async def test_one_peer_holds_at_most_its_share(tmp_path: Path) -> None:
    """At --max-connections 20 a peer holds 8 (a quarter, at least 8): its ninth
    connection is refused while another peer still gets in."""
    async with (
        _upstream() as upstream,
        proxy_to(upstream, tmp_path / "o", max_connections=20) as proxy,
    ):
        port = int(proxy.url.rsplit(":", 1)[1])
        held = []
        for _ in range(8):  # half a head: a slot held, no request in progress
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=("127.0.0.2", 0)
            )
            writer.write(b"GET / HTTP/1.1\r\n")
            held.append((reader, writer))
        await asyncio.sleep(0.3)
        # The ninth makes room among the peer's own: its longest-idle connection.
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, local_addr=("127.0.0.2", 0)
        )
        writer.write(b"GET / HTTP/1.1\r\n")
        assert await asyncio.wait_for(held[0][0].read(), 5) == b""
        async with (
            aiohttp.ClientSession() as s,
            s.post(proxy.url + "/v1/chat/completions", json={"model": "m"}) as r,
        ):
            assert r.status == 200  # another peer: room under the cap
        assert await metric(proxy.admin_url, "tailreplay_proxy_client_connections") <= 9
        for _, w in [*held, (reader, writer)]:
            w.close()


def test_the_share_and_the_storm_are_counted_per_peer() -> None:
    assert [peer_cap(cap, None) for cap in (1, 4, 20, 40, 1000)] == [1, 4, 8, 10, 250]
    assert peer_cap(20, 50) == 20 and peer_cap(100, 3) == 3
    limits = PeerLimits(2, TrustedProxies([]))
    storms = [limits.opened("10.0.0.1") for _ in range(int(STORM_BURST) + 1)]
    assert storms == [False] * int(STORM_BURST) + [True]  # past the burst: a storm
    assert limits.opened("10.0.0.2") is False  # another peer's pace is its own
    assert not limits.full("10.0.0.1", 1) and limits.full("10.0.0.1", 2)
    trusted = PeerLimits(1, TrustedProxies([ipaddress.ip_network("10.0.0.0/8")]))
    assert not trusted.full("10.0.0.1", 5)  # a load balancer carries many clients
    assert not any(trusted.opened("10.0.0.1") for _ in range(100))


def test_a_client_answered_on_every_connection_never_storms() -> None:
    """A client without keep-alive opens a connection per request, as fast as it
    likes: each response it gets returns the token its connection took."""
    limits = PeerLimits(8, TrustedProxies([]))
    for _ in range(int(STORM_BURST) * 10):
        assert limits.opened("10.0.0.1") is False
        limits.served("10.0.0.1")
    # One whose connections are never answered (pushed out, refused) storms.
    assert any(limits.opened("10.0.0.3") for _ in range(int(STORM_BURST) + 1))


async def test_the_share_of_a_peer_is_an_option(tmp_path: Path) -> None:
    """``--max-connections-per-peer 2``: a peer's third connection, with both of its
    others waiting for an answer, is refused with a 503 it can read (what it sent is
    drained first, so the close is no reset) and counted; another peer still gets in."""
    release = asyncio.Event()
    routes = [("POST", "/slow"), ("POST", "/v1/chat/completions")]
    async with held_upstream(release, *routes) as upstream:
        proc, url, admin = start_proxy_process(
            upstream,
            tmp_path / "o",
            "--max-connections",
            "20",
            "--max-connections-per-peer",
            "2",
            "--drain-timeout",
            "1s",
        )
        request = b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
        try:
            port = int(url.rsplit(":", 1)[1])
            held = []
            for _ in range(2):  # each waits for its answer: busy, never pushed out
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, local_addr=("127.0.0.2", 0)
                )
                writer.write(request)
                held.append((reader, writer))
            await asyncio.sleep(0.5)
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=("127.0.0.2", 0)
            )
            writer.write(request)
            answer = await asyncio.wait_for(reader.read(), 10)
            assert answer.startswith(b"HTTP/1.1 503 "), answer
            assert b"connection limit" in answer
            async with aiohttp.ClientSession() as s:
                release.set()
                async with s.post(url + "/v1/chat/completions", json={"model": "m"}) as r:
                    assert r.status == 200
            for held_reader, _ in held:
                assert (await asyncio.wait_for(held_reader.read(12), 10)) == b"HTTP/1.1 200"
            assert await metric(admin, "tailreplay_proxy_connections_peer_refused_total") == 1
            for _, w in [*held, (reader, writer)]:
                w.close()
        finally:
            stop_proxy(proc)
