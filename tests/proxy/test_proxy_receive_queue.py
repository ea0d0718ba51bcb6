"""What waits unread in a client socket, seen without reading it: real TCP sockets
on loopback."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tailreplay.proxy.receive_queue import HEAD_PEEK, Waiting, discard, unread, waiting


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        accepted.setblocking(False)  # as asyncio keeps it
        try:
            yield client, accepted
        finally:
            client.close()
            accepted.close()


def _settle(sock: socket.socket, size: int) -> None:
    deadline = time.monotonic() + 5
    while unread(sock.fileno()) < size and time.monotonic() < deadline:
        time.sleep(0.005)


def test_nothing_part_and_whole_heads_are_told_apart(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, server = pair
    fd = server.fileno()
    assert waiting(fd) is Waiting.NOTHING and unread(fd) == 0
    client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    _settle(server, 46)
    assert waiting(fd) is Waiting.PART
    client.sendall(b"Content-Length: 2\r\n\r\n{}")
    _settle(server, 68)
    assert waiting(fd) is Waiting.HEAD
    # Looking takes nothing: the bytes are all still there for the parser.
    assert unread(fd) == 68
    assert server.recv(100).startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")


def test_a_head_longer_than_the_peek_counts_as_part(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, server = pair
    head = b"GET / HTTP/1.1\r\nX-Long: " + b"a" * HEAD_PEEK + b"\r\n\r\n"
    client.sendall(head)
    _settle(server, len(head))
    assert waiting(server.fileno()) is Waiting.PART


def test_discard_drops_what_waits_so_a_close_is_a_fin(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """With the request drained, the client reads the answer written before the
    close, then an orderly end; without it, the kernel resets the connection."""
    client, server = pair
    client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    _settle(server, 27)
    server.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
    discard(server.fileno())
    assert unread(server.fileno()) == 0
    server.close()
    client.settimeout(5)
    assert client.recv(100).startswith(b"HTTP/1.1 503 ")
    assert client.recv(100) == b""


def test_no_descriptor_waits_for_nothing() -> None:
    assert waiting(-1) is Waiting.NOTHING and unread(-1) == 0
    discard(-1)  # nothing to do, and no error
