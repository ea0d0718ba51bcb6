"""A request with ``Connection: close`` is the connection's last: bytes after it (a
pipelined second request) are dropped, never forwarded upstream."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from aiohttp import web

from tests.proxy_helpers import proxy_to, serve_app


async def test_bytes_after_a_connection_close_request_are_never_forwarded(
    tmp_path: Path,
) -> None:
    seen: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        seen.append(f"{request.method} {request.path_qs}")
        return web.json_response({"choices": [{"message": {"content": "ok"}}]})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    first = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    trailing = (
        b"POST /v1/chat/completions?second=1 HTTP/1.1\r\nHost: x\r\n"
        b"Content-Length: %d\r\n\r\n%b"
        b"GET /third HTTP/1.1\r\nHost: x\r\n\r\n" % (len(body), body)
    )
    async with serve_app(app) as upstream, proxy_to(upstream, tmp_path / "o") as proxy:
        port = int(proxy.url.rsplit(":", 1)[1])
        for split in (True, False):  # in one segment with the first, and after it
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if split:
                writer.write(first)
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.write(trailing)
            else:
                writer.write(first + trailing)
            got = await asyncio.wait_for(reader.read(), 10)  # to the proxy's close
            writer.close()
            assert got.count(b"HTTP/1.1 ") == 1, got  # one answer, then the close
            assert got.startswith(b"HTTP/1.1 200 "), got
        await asyncio.sleep(0.3)  # anything forwarded late would have arrived by now
    assert seen == ["POST /v1/chat/completions"] * 2
