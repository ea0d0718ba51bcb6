"""What waits in a client socket's receive queue, learnt without taking it from the
transport that owns the socket.

At the connection cap the guard must tell a client that has sent its request (the
bytes wait in the kernel until the event loop reads them) from one that has sent
nothing, and a whole request head from part of one: a burst of connections is
admitted before any of them is read. ``FIONREAD`` gives the count and ``MSG_PEEK``
the bytes, each one system call, made only at the cap.
"""

from __future__ import annotations

import enum
import fcntl
import os
import socket
import struct
import termios

__all__ = ["HEAD_PEEK", "Waiting", "discard", "unread", "waiting"]

HEAD_PEEK = 16384
"""Bytes looked at for the end of a head: a head longer than this counts as part of one."""
_DISCARD_MAX = 1 << 16


class Waiting(enum.Enum):
    """What a client has sent that nobody has read yet."""

    NOTHING = "nothing"
    PART = "part of a request head"
    HEAD = "a whole request head"


def unread(fd: int) -> int:
    """Bytes waiting in the socket ``fd``'s receive queue (0 for no descriptor)."""
    if fd < 0:
        return 0
    try:
        raw = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return 0
    return int(struct.unpack("i", raw)[0])


def _peek(fd: int, size: int) -> bytes:
    # A socket object over the same descriptor, detached before it can close it.
    sock = socket.socket(fileno=fd)
    try:
        return sock.recv(size, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except OSError:
        return b""
    finally:
        sock.detach()


def waiting(fd: int) -> Waiting:
    """What the socket ``fd`` holds unread (NOTHING for no descriptor, -1: a transport
    without a socket). Encrypted bytes (TLS) never show a head's end: PART."""
    if fd < 0:
        return Waiting.NOTHING
    count = unread(fd)
    if count == 0:
        return Waiting.NOTHING
    data = _peek(fd, min(count, HEAD_PEEK))
    if b"\r\n\r\n" in data or b"\n\n" in data:
        return Waiting.HEAD
    return Waiting.PART


def discard(fd: int) -> None:
    """Read and drop what waits (up to 64 KiB), so that closing the socket sends a
    FIN after an answer already written, not a reset that may destroy it at the client."""
    if fd < 0:
        return
    left = _DISCARD_MAX
    while left > 0:
        try:
            got = os.read(fd, min(left, 16384))
        except OSError:  # BlockingIOError: nothing more waits
            return
        if not got:
            return
        left -= len(got)
