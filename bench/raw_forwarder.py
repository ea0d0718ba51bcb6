"""The floor for a Python forwarder in the SSE run: bytes passed through, nothing else.

Not a proxy anyone should run: it parses only a request's Content-Length, passes
the upstream's bytes to the client untouched, and knows a response has ended by
the last chunk of a chunked body (which every server in bench/proxy.py sends for
SSE). It is what any asyncio forwarder must at least do — two more socket reads
and writes and two more process wake-ups per event — so the SSE table can tell
the cost of Python and the loop from the cost of tailreplay's own work.

Run: ``python bench/raw_forwarder.py LISTEN_PORT UPSTREAM_PORT``.
"""

from __future__ import annotations

import asyncio
import sys

UPSTREAM = ("127.0.0.1", int(sys.argv[2]))
_idle: list[_Upstream] = []


class _Upstream(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.client: asyncio.Transport | None = None
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.client is not None:
            self.client.write(data)
        self.tail = (self.tail + data)[-5:]
        if self.tail == b"0\r\n\r\n":  # the end of a chunked body: back to the pool
            self.client, self.tail = None, b""
            _idle.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self in _idle:
            _idle.remove(self)
        if self.client is not None:
            self.client.close()


class _Client(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        head, sep, rest = self.buffer.partition(b"\r\n\r\n")
        if not sep:
            return
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(rest) < length:
            return
        self.buffer = rest[length:]
        request = head + sep + rest[:length]
        if _idle:
            upstream = _idle.pop()
            upstream.client = self.transport
            assert upstream.transport is not None
            upstream.transport.write(request)
        else:
            asyncio.get_running_loop().create_task(self._connect(request))

    async def _connect(self, request: bytes) -> None:
        loop = asyncio.get_running_loop()
        transport, upstream = await loop.create_connection(_Upstream, *UPSTREAM)
        upstream.client = self.transport
        transport.write(request)


async def main() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Client, "127.0.0.1", int(sys.argv[1]))
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
