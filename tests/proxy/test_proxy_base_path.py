"""Paths stay under the upstream's base path: dot-segments, however spelled, never
take a request from ``--upstream http://h/tenantA`` to ``/tenantB``.

The resolver (``proxy/dot_segments.py``) is checked over many forms; then nginx, a
server that resolves paths itself (percent-decoding, dot-segments), is the upstream
of two proxies with two base paths, and no request through one reaches the other's
tenant, while ordinary paths reach their own byte for byte.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import ClientSession
from yarl import URL

from tailreplay.proxy.dot_segments import resolutions
from tests.helpers import free_port
from tests.proxy_helpers import proxy_to, records

# Ways out of a base path: every spelling of "..", and slashes encoded to make one.
ESCAPES = [
    "/../tenantB/v1/chat/completions",
    "/%2e%2e/tenantB/v1/chat/completions",
    "/%2E%2E/tenantB/v1/chat/completions",
    "/%2e./tenantB/v1/chat/completions",
    "/.%2E/tenantB/v1/chat/completions",
    "/..%2ftenantB/v1/chat/completions",
    "/..%2FtenantB/v1/chat/completions",
    "/%2e%2e%2ftenantB/v1/chat/completions",
    "/v1%2f..%2f..%2ftenantB/v1/chat/completions",
    "/v1/../../tenantB/v1/chat/completions",
    "/v1/./../../tenantB/v1/chat/completions",
    "/v1/%2e%2e/%2e%2e/tenantB/v1/chat/completions",
    "/v1/..%2F..%2FtenantB/v1/chat/completions",
    "/v1//../../../tenantB/v1/chat/completions",
    "/..",
    "/v1/../..",
    "/..?x=1",
    "/..\\tenantB/v1/chat/completions",
    "/..%5ctenantB/v1/chat/completions",
    "/..;x=1/tenantB/v1/chat/completions",
    "/%2e%2e;/tenantB/v1/chat/completions",
    "/a%2fb/../../tenantB/v1/chat/completions",  # escapes where %2F is not a slash
    # Empty segments that a server merging slashes (nginx's default) drops before "..":
    "//../tenantB/v1/chat/completions",
    "/v1//../../tenantB/v1/chat/completions",
    "/.//../tenantB/v1/chat/completions",
    "/%2f../tenantB/v1/chat/completions",
    "/%2F..%2FtenantB/v1/chat/completions",
    "/v1/%2f/../../tenantB/v1/chat/completions",
    "/v1/%2f%2f../../tenantB/v1/chat/completions",
]
# Dot-segments that stay below the base: forwarded as sent.
STAYS = [
    ("/v1/chat/completions", "/v1/chat/completions"),
    ("/v1/./models", "/v1/models"),
    ("/v1/x/../models", "/v1/models"),
    ("/v1/%2e/models", "/v1/models"),
    ("/v1/x/%2E%2e/models", "/v1/models"),
    ("/v1/..", "/"),
    ("/v1/.", "/v1/"),
    ("/v1/...", "/v1/..."),
    ("/v1/.hidden/..x", "/v1/.hidden/..x"),
    ("/v1/a%20b", "/v1/a%20b"),
    ("/", "/"),
]


@pytest.mark.parametrize("path", ESCAPES)
def test_every_spelling_of_a_way_out_is_found(path: str) -> None:
    assert resolutions(path.partition("?")[0]) is None


@pytest.mark.parametrize(("path", "resolved"), STAYS)
def test_dot_segments_below_the_root_resolve_as_rfc_3986_says(path: str, resolved: str) -> None:
    assert resolved in (resolutions(path) or set())


def test_rfc_3986_examples_of_remove_dot_segments() -> None:
    # §5.2.4's own examples, and §5.4.2's that stay under the root.
    assert resolutions("/a/b/c/./../../g") == {"/a/g"}
    assert resolutions("/b/c/d;p/./g") == {"/b/c/d;p/g"}
    assert resolutions("/b/c/d;p/../g") == {"/b/c/g"}
    assert resolutions("/b/c/g/..") == {"/b/c/"}
    assert resolutions("/b/c/../../../g") is None  # climbs above the root


NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)


@contextmanager
def _nginx(tmp: Path) -> Iterator[str]:
    """nginx on 127.0.0.1 answering, for each tenant's location, which tenant it is
    and the path it resolved (``$uri``) and was sent (``$request_uri``); elsewhere 404."""
    port = free_port()
    answer = '{"tenant":"%s","uri":"$uri","request_uri":"$request_uri"}'
    locations = "".join(
        f"location /tenant{t}/ {{ default_type application/json; return 200 '{answer % t}'; }}"
        for t in ("A", "B")
    )
    conf = tmp / "nginx.conf"
    conf.write_text(
        f"""
worker_processes 1; pid {tmp}/nginx.pid; error_log {tmp}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fcgi; uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  server {{
    listen 127.0.0.1:{port};
    {locations}
    location / {{ default_type application/json; return 404 '{{"tenant":null,"uri":"$uri"}}'; }}
  }}
}}
"""
    )
    assert NGINX is not None
    proc = subprocess.Popen(
        [NGINX, "-c", str(conf), "-p", str(tmp), "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/tenantA/", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(proc.stderr.read() if proc.stderr else b"") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def _raw(url: str, path: str) -> tuple[int, dict[str, object]]:
    """``POST path`` written on a socket byte for byte (HTTP clients normalise paths)."""
    target = URL(url)
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {target.raw_authority}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    reader, writer = await asyncio.open_connection(target.host, target.port)
    try:
        writer.write(head.encode() + body)
        raw = await asyncio.wait_for(reader.read(-1), 10)
    finally:
        writer.close()
    status_line, _, rest = raw.partition(b"\r\n")
    answer_head, _, answer = rest.partition(b"\r\n\r\n")
    assert b"chunked" not in answer_head.lower(), raw[:300]
    return int(status_line.split()[1]), json.loads(answer)


async def _metric(admin: str, name: str) -> float:
    """A counter off the proxy's /metrics (which runs on this test's loop)."""
    async with ClientSession() as session, session.get(f"{admin}/metrics") as response:
        text = await response.text()
    line = next(x for x in text.splitlines() if x.startswith(f"{name} "))
    return float(line.split()[1])


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (make test installs it)")
async def test_no_request_crosses_from_one_base_path_to_another(tmp_path: Path) -> None:
    (tmp_path / "nginx").mkdir()
    with _nginx(tmp_path / "nginx") as up:
        for own, other in (("A", "B"), ("B", "A")):
            out = tmp_path / f"cap{own}"
            async with proxy_to(f"{up}/tenant{own}", out) as proxy:
                assert proxy.admin_url is not None
                for path in ESCAPES:
                    path = path.replace("tenantB", f"tenant{other}")
                    status, answer = await _raw(proxy.url, path)
                    assert status == 400, (path, answer)
                    assert "base path" in answer["error"]["message"]  # type: ignore[index]
                # Dot-segments that stay, and ordinary paths, reach their own tenant
                # with the bytes as sent (nginx resolves them itself).
                for path, resolved in STAYS:
                    status, answer = await _raw(proxy.url, path)
                    assert status == 200, (path, answer)
                    assert answer["tenant"] == own
                    assert answer["request_uri"] == f"/tenant{own}{path}"
                    decoded = urllib.request.unquote(resolved)
                    assert answer["uri"] == f"/tenant{own}{decoded}", (path, answer)
                refused = await _metric(proxy.admin_url, "tailreplay_proxy_paths_refused_total")
                assert refused == len(ESCAPES)
            # Refusals are recorded as such: status 400, never an upstream answer.
            kept = [r for r in records(out) if r.status == 400]
            assert len(kept) == len(ESCAPES)
            assert {r.error for r in kept} == {"path_outside_base"}


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (make test installs it)")
async def test_dot_segments_do_not_lead_from_one_route_to_another(tmp_path: Path) -> None:
    from tailreplay.proxy.config import Route

    (tmp_path / "nginx").mkdir()
    with _nginx(tmp_path / "nginx") as up:
        route = Route("/v1/models", URL(f"{up}/tenantB"))
        async with proxy_to(f"{up}/tenantA", tmp_path / "cap", routes=(route,)) as proxy:
            # The prefix picks tenantB's upstream; resolved, the path is tenantA's route.
            status, _ = await _raw(proxy.url, "/v1/models/../chat/completions")
            assert status == 400
            status, answer = await _raw(proxy.url, "/v1/models/x/../list")
            assert status == 200 and answer["tenant"] == "B"
            status, answer = await _raw(proxy.url, "/v1/x/../chat/completions")
            assert status == 200 and answer["tenant"] == "A"


async def test_a_fragment_in_the_request_target_is_checked_as_it_would_be_sent(
    tmp_path: Path,
) -> None:
    """A request target holds no fragment; the URL the proxy sends drops one, so
    ``/..#/tenantB`` would go out as ``/tenantA/..``: it is judged as that, refused."""
    from aiohttp import web

    from tests.proxy_helpers import serve_app

    seen: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.raw_path)
        return web.json_response({"tenant": "A"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    async with serve_app(app) as up, proxy_to(f"{up}/tenantA", tmp_path / "cap") as proxy:
        for path in ("/..#/tenantB/v1/chat/completions", "/..#", "/%2e%2e#", "/v1/../..#/x"):
            status, _ = await _raw(proxy.url, path)
            assert status == 400, path
        status, _ = await _raw(proxy.url, "/v1/chat/completions#frag")
        assert status == 200
    assert seen == ["/tenantA/v1/chat/completions"]
