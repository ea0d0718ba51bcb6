"""The head and framing of a relayed response, as a client on the wire sees them.

The proxy writes a relayed response's head itself (proxy/response_head.py): these
tests talk raw HTTP to it, behind an upstream that answers raw bytes per path.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tailreplay.proxy.response_head import relay_head
from tests.proxy_helpers import proxy_to, records

ANSWERS = {
    b"/latin": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Name: caf\xe9 \xff\r\n\r\nok",
    b"/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    b"/close": b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end",
    b"/head": b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n"
    b"Date: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n",
    b"/204": b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
    b"/304": b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
    b"/control": b"HTTP/1.1 200 O\x00K\x01\r\nContent-Length: 2\r\n\r\nok",
    b"/099": b"HTTP/1.1 099 Weird\r\nContent-Length: 2\r\n\r\nok",
    b"/101": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n",
    b"/trailer": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n"
    b"0\r\nSet-Cookie: evil=1\r\nX-After: 1\r\n\r\n",
    b"/gzip": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nokEXTRA",
    b"/gzip-chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
    b"3\r\n\x1f\x8b\x08\r\n0\r\n\r\n",
    b"/twice": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    b"HTTP/1.1 404 Not Found\r\nContent-Length: 22\r\nX-Unasked: 1\r\n\r\n"
    b'{"error":"not yours"}\n',
}
CLOSING = {b"/close", b"/gzip"}
"""Answers whose body ends when the upstream closes."""


@asynccontextmanager
async def raw_upstream() -> AsyncIterator[str]:
    """An upstream answering each path with its bytes from ANSWERS (closing after a
    close-delimited one)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                method, path = head.split(b" ", 2)[:2]
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        await reader.readexactly(int(line.split(b":")[1]))
                writer.write(ANSWERS[path] if method != b"HEAD" else ANSWERS[b"/head"])
                await writer.drain()
                if path in CLOSING:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """One request on an open connection: the status line, the headers (lower-cased
    names) and the body as the head framed it (to the close when it framed none)."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status, *lines = head[:-4].split(b"\r\n")
    headers = {k.lower(): v for k, _, v in (line.partition(b": ") for line in lines)}
    if request.startswith(b"HEAD ") or int(status.split(b" ")[1]) in (204, 304):
        body = b""
    elif b"content-length" in headers:
        body = await reader.readexactly(int(headers[b"content-length"]))
    elif headers.get(b"transfer-encoding") == b"chunked":
        body = b""
        while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
            body += (await reader.readexactly(size + 2))[:-2]
        await reader.readexactly(2)
    else:
        body = await reader.read()
    return status, headers, body


async def test_header_bytes_pass_as_the_upstream_sent_them(tmp_path: Path) -> None:
    async with raw_upstream() as upstream, proxy_to(upstream, tmp_path) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.url[7:].split(":"))
        status, headers, body = await exchange(
            reader, writer, b"GET /latin HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        writer.close()
    assert (status, body) == (b"HTTP/1.1 200 OK", b"ok")
    assert headers[b"x-name"] == b"caf\xe9 \xff"  # not re-encoded as UTF-8
    assert b"date" in headers  # added: the upstream sent none
    assert b"server" not in headers  # the proxy does not announce itself


async def test_an_http10_client_gets_a_chunked_answer_whole_then_the_close(
    tmp_path: Path,
) -> None:
    async with raw_upstream() as upstream, proxy_to(upstream, tmp_path) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.url[7:].split(":"))
        request = b"GET /chunked HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
        status, headers, body = await asyncio.wait_for(exchange(reader, writer, request), 10)
        writer.close()
    assert (status, body) == (b"HTTP/1.0 200 OK", b"hello world")
    assert b"transfer-encoding" not in headers and b"content-length" not in headers
    assert headers.get(b"connection", b"close") != b"keep-alive"


async def test_a_close_delimited_answer_is_chunked_and_the_connection_stays(
    tmp_path: Path,
) -> None:
    async with raw_upstream() as upstream, proxy_to(upstream, tmp_path) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.url[7:].split(":"))
        answers = [
            await asyncio.wait_for(exchange(reader, writer, request), 10)
            for request in (
                b"GET /close HTTP/1.1\r\nHost: x\r\n\r\n",
                b"HEAD /head HTTP/1.1\r\nHost: x\r\n\r\n",
                b"GET /204 HTTP/1.1\r\nHost: x\r\n\r\n",
                b"GET /304 HTTP/1.1\r\nHost: x\r\n\r\n",
                b"GET /latin HTTP/1.1\r\nHost: x\r\n\r\n",
            )
        ]
        writer.close()
    (_, close, text), (_, head, none), (s204, h204, _), (s304, h304, _), (_, _, ok) = answers
    assert (close[b"transfer-encoding"], text) == (b"chunked", b"until the end")
    assert (head[b"content-length"], head[b"date"], none) == (
        b"11",
        b"Mon, 01 Jan 2024 00:00:00 GMT",
        b"",
    )
    assert s204.startswith(b"HTTP/1.1 204") and b"content-length" not in h204
    assert s304.startswith(b"HTTP/1.1 304") and b"content-length" not in h304
    assert ok == b"ok"  # the same connection carried all five


def test_a_line_break_in_the_upstreams_head_is_never_written() -> None:
    for headers, reason in (
        ([("X-A", "1\r\nSet-Cookie: s=1")], "OK"),
        ([("X-A", "1\n")], "OK"),
        ([("X-A\r", "1")], "OK"),
        ([], "OK\r\nX-B: 2"),
        ([("X-A", "\u20ac")], "OK"),  # not from the wire: the wire's is Latin-1
    ):
        assert relay_head((1, 1), "GET", 200, reason, headers, keep_alive=True) is None
    made = relay_head((1, 1), "GET", 200, "OK", [("X-A", "1")], keep_alive=False)
    assert made is not None and made[0].endswith(b"Connection: close\r\n\r\n")


async def test_heads_a_client_could_not_read_are_502s_and_trailers_stay_trailers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with raw_upstream() as upstream, proxy_to(upstream, tmp_path) as proxy:
        answers = {}
        paths = (b"/control", b"/099", b"/101", b"/trailer", b"/gzip", b"/gzip-chunked", b"/latin")
        for path in paths:
            reader, writer = await asyncio.open_connection(*proxy.url[7:].split(":"))
            request = b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n"
            answers[path] = await asyncio.wait_for(exchange(reader, writer, request), 10)
            writer.close()
    # A transfer coding other than chunked belongs to the upstream's hop: its bytes
    # relayed without it would be compressed with nothing to say so.
    for path in (b"/control", b"/099", b"/101", b"/gzip", b"/gzip-chunked"):
        assert answers[path][0].startswith(b"HTTP/1.1 502"), path
    status, headers, body = answers[b"/trailer"]
    assert (status, body) == (b"HTTP/1.1 200 OK", b"ok")
    assert b"set-cookie" not in headers and b"x-after" not in headers
    assert "proxy bug" not in caplog.text


async def test_a_second_answer_in_the_same_read_is_never_relayed(tmp_path: Path) -> None:
    """An upstream that sends an answer nobody asked for right after the real one (in
    one segment): the client gets the real answer whole, and the next request on its
    connection gets its own answer, not the unasked one."""
    async with raw_upstream() as upstream, proxy_to(upstream, tmp_path) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.url[7:].split(":"))
        first = await asyncio.wait_for(
            exchange(reader, writer, b"GET /twice HTTP/1.1\r\nHost: x\r\n\r\n"), 10
        )
        second = await asyncio.wait_for(
            exchange(reader, writer, b"GET /latin HTTP/1.1\r\nHost: x\r\n\r\n"), 10
        )
        writer.close()
    (status, headers, body), (status2, _, body2) = first, second
    assert (status, headers[b"content-length"], body) == (b"HTTP/1.1 200 OK", b"2", b"ok")
    assert b"x-unasked" not in headers
    assert (status2, body2) == (b"HTTP/1.1 200 OK", b"ok")
    assert [r.status for r in records(tmp_path)] == [200, 200]
