"""Shadows that attack the proxy with their answers, on raw sockets (an HTTP server
library would refuse to write most of them): each reads a copy's head and body, then

- ``flood``: ``100 Continue`` heads without end;
- ``endless``: a chunked SSE stream without end, as fast as the proxy reads it;
- ``drip``: a 200 declaring 1 MB, then a byte every 100 ms;
- ``reset``: a 200 declaring 1 MB, 1 KB of it, then a TCP reset;
- ``headers``: a status line, then header lines without end;
- ``huge``: a 200 MB JSON body, as fast as the proxy reads it.

Every loop is bounded (in count, and by the proxy closing the connection), so a
shadow left running stops on its own.

    .venv/bin/python bench/hostile_shadow.py KIND PORT
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys

__all__ = ["KINDS", "serve_hostile"]

KINDS = ("flood", "endless", "drip", "reset", "headers", "huge")
_OK_SSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
_EVENT = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"o"}}]}\n\n' * 16
_CHUNK = b"%x\r\n%b\r\n" % (len(_EVENT), _EVENT)
_HUGE = 200 * 10**6


async def _read_request(reader: asyncio.StreamReader) -> bool:
    """The copy's head and its Content-Length body; False if the proxy went away."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return False
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    try:
        await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    return True


async def _answer(kind: str, writer: asyncio.StreamWriter) -> None:
    if kind == "flood":
        for _ in range(10**6):
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" * 64)
            await writer.drain()
    elif kind == "endless":
        writer.write(_OK_SSE)
        for _ in range(10**7):
            writer.write(_CHUNK)
            await writer.drain()
    elif kind == "drip":
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
        writer.write(b"Content-Length: 1000000\r\n\r\n")
        for _ in range(10**4):
            writer.write(b" ")
            await writer.drain()
            await asyncio.sleep(0.1)
    elif kind == "reset":
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
        writer.write(b"Content-Length: 1000000\r\n\r\n" + b" " * 1000)
        await writer.drain()
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
    elif kind == "headers":
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for i in range(10**6):
            writer.write(b"X-Filler-%d: %s\r\n" % (i, b"v" * 64))
            await writer.drain()
    elif kind == "huge":
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
        writer.write(b"Content-Length: %d\r\n\r\n" % _HUGE)
        block = b" " * 65536
        for _ in range(_HUGE // len(block)):
            writer.write(block)
            await writer.drain()
    else:
        raise ValueError(f"unknown kind {kind!r}")


async def serve_hostile(kind: str, host: str, port: int) -> asyncio.Server:
    """A listening hostile shadow of ``kind`` (one of ``KINDS``); close it when done."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await _read_request(reader):
                await _answer(kind, writer)
        except (ConnectionError, OSError):
            pass  # the proxy cut it: what it is meant to do
        finally:
            writer.transport.abort()

    return await asyncio.start_server(one, host, port)


async def _main(kind: str, port: int) -> None:
    server = await serve_hostile(kind, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], int(sys.argv[2])))
