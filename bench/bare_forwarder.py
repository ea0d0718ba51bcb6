"""The baseline for bench/proxy.py: the least an aiohttp forwarding proxy can do.

One shared ClientSession, the body passed through, the response streamed back.
No recording, no header policy, no checks. Run: python bench/bare_forwarder.py PORT UPSTREAM
"""

from __future__ import annotations

import sys

import aiohttp
from aiohttp import web

HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "host", "content-length"})
SESSION = web.AppKey("session", aiohttp.ClientSession)


async def forward(request: web.Request) -> web.StreamResponse:
    upstream = request.app["upstream"] + request.raw_path
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
    async with request.app[SESSION].request(
        request.method, upstream, headers=headers, data=await request.read(), auto_decompress=False
    ) as r:
        out = web.StreamResponse(
            status=r.status, headers={k: v for k, v in r.headers.items() if k.lower() not in HOP}
        )
        await out.prepare(request)
        async for chunk in r.content.iter_any():
            await out.write(chunk)
        await out.write_eof()
        return out


async def session_ctx(app: web.Application):  # type: ignore[no-untyped-def]
    app[SESSION] = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), auto_decompress=False, read_bufsize=1 << 20
    )
    yield
    await app[SESSION].close()


def main() -> None:
    port, upstream = int(sys.argv[1]), sys.argv[2].rstrip("/")
    app = web.Application()
    app["upstream"] = upstream
    app.cleanup_ctx.append(session_ctx)
    app.router.add_route("*", "/{tail:.*}", forward)
    print("ready", flush=True)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
