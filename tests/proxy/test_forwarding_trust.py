"""Forwarding headers follow a trust model: from a peer outside ``--trusted-proxies``,
a client's own ``X-Forwarded-*``, ``Forwarded`` and ``X-Real-IP`` never reach the
upstream, the shadow or the record, and the proxy sets its own; from a trusted peer
the chain is extended.

Real sockets on 127.0.0.1: a client, the proxy, and an upstream and a shadow that
echo the headers they received.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from click.testing import CliRunner
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from tailreplay.cli import cli
from tailreplay.proxy.forwarding import TrustedProxies, parse_trusted
from tailreplay.proxy.shadow import ShadowConfig
from tests.proxy_helpers import proxy_to, records, serve_app

SEEN = web.AppKey("seen", list)

FORGED = [
    ("X-Forwarded-For", "6.6.6.6"),
    ("x-forwarded-for", "7.7.7.7, 8.8.8.8"),
    ("X-Forwarded-Host", "evil.example"),
    ("X-FORWARDED-PROTO", "https"),
    ("X-Forwarded-Port", "443"),
    ("X-Forwarded-Prefix", "/admin"),
    ("X-Forwarded-Server", "evil"),
    ("Forwarded", "for=6.6.6.6;proto=https;host=evil.example"),
    ("X-Real-IP", "6.6.6.6"),
]
FORGED_VALUES = {"6.6.6.6", "7.7.7.7", "8.8.8.8", "evil", "evil.example", "https", "/admin", "443"}
CLIENT_NAMES = {n.lower() for n, _ in FORGED}


def _echo_app() -> web.Application:
    """Answers a chat request with the headers it received (every value, in order);
    keeps them in ``app[SEEN]`` too."""

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        received = [[k, v] for k, v in request.headers.items()]
        request.app[SEEN].append(received)
        return web.json_response({"choices": [{"message": {"content": "ok"}}], "headers": received})

    app = web.Application()
    app[SEEN] = []
    app.router.add_post("/v1/chat/completions", answer)
    return app


def _forwarding(pairs: list[list[str]]) -> dict[str, list[str]]:
    """The forwarding headers among ``pairs``, by lower-case name: every value."""
    out: dict[str, list[str]] = {}
    for name, value in pairs:
        lower = name.lower()
        if lower.startswith("x-forwarded-") or lower in ("forwarded", "x-real-ip"):
            out.setdefault(lower, []).append(value)
    return out


@asynccontextmanager
async def _through_proxy(
    tmp_path: Path, trusted: str | None
) -> AsyncIterator[tuple[str, web.Application, web.Application]]:
    upstream, shadow = _echo_app(), _echo_app()
    overrides: dict[str, Any] = {}
    if trusted is not None:
        overrides["trusted_proxies"] = parse_trusted(trusted)
    async with serve_app(upstream) as up_url, serve_app(shadow) as shadow_url:
        overrides["shadow"] = ShadowConfig(URL(shadow_url), share=1.0)
        async with proxy_to(up_url, tmp_path, **overrides) as proxy:
            yield proxy.url, upstream, shadow


async def _send(url: str, headers: list[tuple[str, str]]) -> dict[str, list[str]]:
    """A chat request written on a socket as it is (repeated and oddly cased headers
    too, which HTTP client libraries merge); the forwarding headers the upstream got."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    target = URL(url)
    head = [
        "POST /v1/chat/completions HTTP/1.1",
        f"Host: {target.raw_authority}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in headers),
    ]
    request = ("\r\n".join(head) + "\r\n\r\n" + body).encode()
    reader, writer = await asyncio.open_connection(target.host, target.port)
    try:
        writer.write(request)
        raw = await asyncio.wait_for(reader.read(-1), 10)
    finally:
        writer.close()
    status_line, _, rest = raw.partition(b"\r\n")
    assert b" 200 " in status_line, raw[:300]
    answer_head, _, answer = rest.partition(b"\r\n\r\n")
    assert b"chunked" not in answer_head.lower()  # the echo answers with a length
    return _forwarding(json.loads(answer)["headers"])


async def _shadow_saw(shadow: web.Application) -> dict[str, list[str]]:
    for _ in range(100):  # the copy is sent beside the request, and may trail it
        if shadow[SEEN]:
            return _forwarding(shadow[SEEN][0])
        await asyncio.sleep(0.05)
    raise AssertionError("the shadow got no copy")


def _recorded(out: Path) -> dict[str, list[str]]:
    for _ in range(100):
        got = records(out)
        if got:
            assert len(got) == 1 and got[0].req_headers is not None
            return _forwarding([[k, v] for k, v in got[0].req_headers])
        time.sleep(0.05)
    raise AssertionError("no record")


@pytest.mark.parametrize("trusted", [None, "10.0.0.0/8,192.168.0.0/16,::1/128"])
async def test_a_forged_set_never_passes_an_untrusted_peer(
    tmp_path: Path, trusted: str | None
) -> None:
    async with _through_proxy(tmp_path, trusted) as (url, upstream, shadow):
        got = await _send(url, FORGED)
        host = URL(url).raw_authority
        expected = {
            "x-forwarded-for": ["127.0.0.1"],
            "x-forwarded-proto": ["http"],
            "x-forwarded-host": [host],
        }
        assert got == expected
        assert _forwarding(upstream[SEEN][0]) == expected
        assert await _shadow_saw(shadow) == expected
    # The record's client address follows the same rule: the peer, not the forgery.
    assert _recorded(tmp_path) == expected
    for pairs in (upstream[SEEN][0], shadow[SEEN][0]):
        assert not FORGED_VALUES & {v for _, v in pairs}, pairs


async def test_spellings_a_server_reads_as_forwarding_and_cdn_claims_never_pass(
    tmp_path: Path,
) -> None:
    """CGI and WSGI servers read ``X_Forwarded_For`` as ``X-Forwarded-For``; CDNs name
    the client in headers of their own; some servers take the path from
    ``X-Original-URL``. From an untrusted peer, none of them reaches the upstream."""
    claims = [
        ("X_Forwarded_For", "6.6.6.6"),
        ("X-Forwarded_Proto", "https"),
        ("X_Real_IP", "6.6.6.6"),
        ("True-Client-IP", "6.6.6.6"),
        ("CF-Connecting-IP", "6.6.6.6"),
        ("X-Client-IP", "6.6.6.6"),
        ("X-Original-URL", "/admin"),
    ]
    async with _through_proxy(tmp_path, None) as (url, upstream, shadow):
        await _send(url, claims)
        await _shadow_saw(shadow)  # the copy may trail the answer
        for pairs in (upstream[SEEN][0], shadow[SEEN][0]):
            names = {n.lower() for n, _ in pairs}
            assert not names & {n.lower() for n, _ in claims}, pairs
            assert not {"6.6.6.6", "https", "/admin"} & {v for _, v in pairs}, pairs


async def test_a_trusted_peer_extends_the_chain(tmp_path: Path) -> None:
    async with _through_proxy(tmp_path, "127.0.0.1") as (url, upstream, shadow):
        got = await _send(url, FORGED)
        expected = {
            "x-forwarded-for": ["6.6.6.6, 7.7.7.7, 8.8.8.8, 127.0.0.1"],
            "x-forwarded-host": ["evil.example"],
            "x-forwarded-proto": ["https"],
            "x-forwarded-port": ["443"],
            "x-forwarded-prefix": ["/admin"],
            "x-forwarded-server": ["evil"],
            "forwarded": ["for=6.6.6.6;proto=https;host=evil.example"],
            "x-real-ip": ["6.6.6.6"],
        }
        assert got == expected and _forwarding(upstream[SEEN][0]) == expected
        assert await _shadow_saw(shadow) == expected
    assert _recorded(tmp_path) == expected


async def test_a_trusted_peer_without_a_chain_starts_one(tmp_path: Path) -> None:
    async with _through_proxy(tmp_path, "127.0.0.0/8") as (url, _, _):
        got = await _send(url, [])
    assert got == {
        "x-forwarded-for": ["127.0.0.1"],
        "x-forwarded-proto": ["http"],
        "x-forwarded-host": [URL(url).raw_authority],
    }


def test_trust_is_by_address_and_block() -> None:
    trusted = TrustedProxies(parse_trusted("10.0.0.0/8, 127.0.0.1,2001:db8::/32"))
    assert "10.2.3.4" in trusted and "127.0.0.1" in trusted and "2001:db8::1" in trusted
    assert "::ffff:10.0.0.1" in trusted  # an IPv4 peer of a dual-stack listener
    assert "11.0.0.1" not in trusted and "127.0.0.2" not in trusted
    assert None not in trusted and "" not in trusted and "not an address" not in trusted
    assert "127.0.0.1" not in TrustedProxies(())
    assert parse_trusted("::1") == (ipaddress.ip_network("::1/128"),)
    for bad in ("banana", "10.0.0.0/33", ",", "10.0.0.1;rm -rf"):
        with pytest.raises(ValueError):
            parse_trusted(bad)


def test_the_headers_module_keeps_what_is_not_forwarding() -> None:
    from tailreplay.proxy.forwarding import forwarding
    from tailreplay.proxy.headers import request_headers_upstream

    headers = CIMultiDictProxy(CIMultiDict([*FORGED, ("Authorization", "Bearer k")]))
    fwd = forwarding(headers, peer="127.0.0.1", trusted=False, scheme="http", host="p:1")
    out = request_headers_upstream(headers, fwd)
    assert ("Authorization", "Bearer k") in out
    assert {n.lower() for n, _ in out} - {"authorization"} == {
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
    }
    assert CLIENT_NAMES - {n.lower() for n, _ in out}  # the client's own are gone


@pytest.mark.parametrize("value", ["banana", "10.0.0.0/40", ","])
def test_a_bad_trusted_proxies_value_is_one_line(value: str) -> None:
    args = ["proxy", "--upstream", "http://127.0.0.1:9", "--trusted-proxies", value]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "--trusted-proxies" in result.stderr and "Traceback" not in result.output
