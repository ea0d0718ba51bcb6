"""The floor of a forwarder on aiohttp's server, for the SSE run of bench/proxy.py.

What ``tailreplay proxy`` does to pass an exchange on, and nothing of what it does
to record it: aiohttp's low-level server (``web.Server``, a task a request, as the
proxy runs it), the request's body read whole, the proxy's own upstream client
(``tailreplay/http/client.py``: the body pushed to a callback as it is read) and
the response head and chunks written to the client's transport from that
callback (``proxy/response_head.py``). No admission rules, no header policy, no
timing, no tap, no recorder. Between bench/raw_forwarder.py (bytes passed on
inside read callbacks) and this, the cost of aiohttp's server; between this and
tailreplay, the cost of recording.

Run: ``python bench/aiohttp_floor.py LISTEN_PORT UPSTREAM_PORT``.
"""

from __future__ import annotations

import asyncio
import sys

from aiohttp import web

from tailreplay.http.client import UpstreamPool, split_url
from tailreplay.proxy.response_head import relay_head

HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "host", "content-length"})


class _Done(web.StreamResponse):
    """A response written to the transport by the handler: aiohttp writes nothing."""

    def __init__(self, status: int, *, keep_alive: bool) -> None:
        super().__init__(status=status)
        self._keep_alive = keep_alive
        self._eof_sent = True


class Forwarder:
    def __init__(self, upstream: str) -> None:
        self.origin, _ = split_url(upstream)
        self.pool = UpstreamPool(timeout_s=60.0, connect_timeout_s=5.0)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        body = await request.read()
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP]
        upstream = await self.pool.send(
            self.origin, request.method, request.raw_path, headers, body
        )
        kept = [(k, v) for k, v in upstream.headers if k.lower() not in HOP]
        made = relay_head(
            request.version,
            request.method,
            upstream.status,
            upstream.reason,
            kept,
            keep_alive=request.keep_alive,
        )
        client = request.transport
        if made is None or client is None:
            upstream.close()
            return web.Response(status=502)
        head, framing = made

        def framed(chunk: bytes) -> bytes:
            if not chunk or framing.empty:
                return b""
            return b"%x\r\n%b\r\n" % (len(chunk), chunk) if framing.chunked else chunk

        def relay(chunk: bytes) -> bool:
            client.write(framed(chunk))
            return True

        try:
            client.write(head + b"".join(map(framed, upstream.take_held())))
            upstream.start(relay)
            while not await upstream.wait():
                upstream.resume()
            if framing.chunked:
                client.write(b"0\r\n\r\n")
        finally:
            upstream.close()
        return _Done(upstream.status, keep_alive=framing.keep_alive)


async def main() -> None:
    port, upstream = int(sys.argv[1]), f"http://127.0.0.1:{sys.argv[2]}"
    forwarder = Forwarder(upstream)
    server = web.Server(forwarder.handle, access_log=None)
    loop = asyncio.get_running_loop()
    await loop.create_server(server, "127.0.0.1", port)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
