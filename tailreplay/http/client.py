"""The HTTP/1.1 client of the proxy (to its upstream) and the replayer (to its
target): pooled keep-alive connections, bodies pushed to a callback as they arrive.

Why not aiohttp's client: on the streaming path it cost time to first token, and
per request CPU the replayer's dispatch rate paid for.
With it, every SSE event went parser → StreamReader → a task resumed → the relay,
and opening a request built a dozen objects (request, response, timer, trace
hooks, cookie filter); at 100 concurrent streams the proxy added 3 to 4 ms to the
P99 time to first token (bench/proxy.py). Here each connection is an
asyncio Protocol with an llhttp parser (httptools; ``connection``) that hands body
bytes to the relay inside the callback that read them: an event goes from the
upstream socket to the client's with no task switch.

One request at a time per connection (no pipelining); a connection goes back to
the pool when its response ended and the upstream allows keep-alive. A request
sent on a reused connection that the upstream had already closed (the idle-close
race every pooling client meets) is sent once more on a new connection — only
when not a byte of answer came back and the body is in memory to send again.
With ``max_connections`` a request waits for a free connection (the replayer's
``--connections``); the proxy opens as many as its clients need.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Coroutine
from typing import Any
from urllib.parse import urlsplit

from tailreplay.http.connection import (
    Connection,
    Origin,
    StaleConnection,
    UpstreamError,
    UpstreamResponse,
    timeout_error,
)

__all__ = [
    "Origin",
    "UpstreamError",
    "UpstreamPool",
    "UpstreamResponse",
    "framing",
    "request_line",
    "split_url",
]

_WATCH_S = 0.1
"""How often the pool looks for requests past their deadline (a tenth of the timeout
when that is shorter): how late a timeout can fire."""


_NO_BODY = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})
"""Methods sent without ``Content-Length: 0`` when they carry no body."""
_JOINED_BYTES = 1 << 20
"""A body up to this size goes out joined to its head (one segment, one wake-up of the
upstream); a larger one after it, not copied to join them."""


def _write(conn: Connection, head: bytes, body: bytes) -> None:
    if len(body) <= _JOINED_BYTES:
        conn.write(head + body)
    else:
        conn.write(head)
        conn.write(body)


def request_line(method: str, target: str, origin: Origin) -> str:
    """A request's first line and its ``Host`` header."""
    return f"{method} {target} HTTP/1.1\r\nHost: {origin.host_header}\r\n"


def framing(method: str, body: bytes | None) -> str:
    """The framing header of a request whose body is in memory (None: empty): none, or
    its length."""
    if body:
        return f"Content-Length: {len(body)}\r\n"
    return "" if method in _NO_BODY else "Content-Length: 0\r\n"


def _reason(exc: OSError) -> str:
    """Why a connect failed, without the address (asyncio puts it in ``strerror``)."""
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or "TLS handshake failed")
    if exc.errno:
        return os.strerror(exc.errno)
    return type(exc).__name__


def split_url(url: str) -> tuple[Origin, str]:
    """An http(s) URL's origin and request target (path and query)."""
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Origin(parts.scheme, parts.hostname or "", parts.port or default), target


class UpstreamPool:
    """Keep-alive connections per origin, reused most-recent first."""

    def __init__(
        self,
        *,
        timeout_s: float,
        connect_timeout_s: float,
        keepalive_s: float = 60.0,
        max_idle: int = 256,
        max_connections: int | None = None,
        recv_buffer: int | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.recv_buffer = recv_buffer
        """The kernel's receive buffer of each connection (SO_RCVBUF), None: the
        system's. A small one bounds what one read hands the parser (and so how long
        one callback holds the loop), and TCP holds a fast sender back at that pace."""
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self.max_idle = max_idle
        self.max_connections = max_connections
        self._idle: dict[Origin, list[Connection]] = {}
        self._all: set[Connection] = set()
        self._opening = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._tls: ssl.SSLContext | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._watch: asyncio.TimerHandle | None = None
        self._watch_s = max(min(_WATCH_S, timeout_s / 10), 0.001)

    def send(
        self,
        origin: Origin,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes | AsyncIterator[bytes] | None,
        content_length: int | None = None,
    ) -> Coroutine[Any, Any, UpstreamResponse]:
        """Send a request and wait for the head of its answer (awaited: ``send_head``'s
        own coroutine, not one awaiting it, so the proxy's requests resume no extra level).

        ``body`` is bytes, or an async iterator of bytes sent as it comes (with
        ``content_length`` if known, else chunked). The whole exchange — connect,
        send, head and body — must end within ``timeout_s`` (or fails up to ``_WATCH_S``
        after).
        """
        lines = [request_line(method, target, origin)]
        lines += [f"{name}: {value}\r\n" for name, value in headers]
        chunked = False
        if isinstance(body, bytes):
            lines.append(framing(method, body))
        elif body is not None:
            if content_length is not None:
                lines.append(f"Content-Length: {content_length}\r\n")
            else:
                chunked = True
                lines.append("Transfer-Encoding: chunked\r\n")
        lines.append("\r\n")
        # The client's header bytes pass through as the server decoded them.
        head = "".join(lines).encode("utf-8", "surrogateescape")
        return self.send_head(origin, method, head, body, chunked)

    async def send_head(
        self,
        origin: Origin,
        method: str,
        head: bytes,
        body: bytes | AsyncIterator[bytes] | None,
        chunked: bool = False,
    ) -> UpstreamResponse:
        """``send`` with the request's head already made: its request line (from
        ``request_line``), headers, framing and the blank line, as bytes. For a caller
        whose heads differ only in a header or two (the replayer, thousands a second)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        for attempt in (1, 2):
            # The second attempt on a new connection: the idle ones may be as stale as
            # the first (an upstream that closes each after one answer).
            conn = await self._acquire(origin, deadline, fresh=attempt == 2)
            response = UpstreamResponse(conn, method)
            conn.response = response
            conn.deadline = deadline
            if self._watch is None:
                self._watch = loop.call_later(self._watch_s, self._check_deadlines)
            try:
                if body is None:
                    conn.write(head)
                elif isinstance(body, bytes):
                    _write(conn, head, body)
                else:
                    await conn.send(head, body, chunked)
                response.sent_ns = time.monotonic_ns()
                await response.head_arrived
            except StaleConnection:
                conn.finish(response, reusable=False)
                if attempt == 1 and isinstance(body, bytes | None):
                    continue
                raise UpstreamError(
                    "upstream_error", "the upstream closed the connection"
                ) from None
            except BaseException:
                conn.finish(response, reusable=False)
                raise
            return response
        raise AssertionError("unreachable")

    async def fetch(
        self, origin: Origin, target: str, headers: list[tuple[str, str]], *, limit: int
    ) -> tuple[int, bytes]:
        """GET ``target`` and read its whole body: (status, body). A body over ``limit``
        bytes is an ``UpstreamError`` (the connection is dropped), as is a failure or
        the pool's timeout."""
        resp = await self.send(origin, "GET", target, headers, None)
        chunks: list[bytes] = []
        size = 0

        def keep(chunk: bytes) -> bool:
            nonlocal size
            size += len(chunk)
            chunks.append(chunk)
            return size <= limit

        try:
            resp.start(keep)
            await resp.wait()
        finally:
            resp.close()
        if size > limit:
            raise UpstreamError("upstream_error", f"the answer is over {limit:,} bytes")
        return resp.status, b"".join(chunks)

    async def open_idle(self, origin: Origin, count: int) -> int:
        """Open up to ``count`` connections to ``origin`` and keep them idle for the next
        requests; returns how many opened. No request is sent, so nothing reaches the
        origin's logs, metrics or a capture in front of it (a probe request did: a replay
        through the proxy recorded its warm-up as traffic). A connection the origin closes
        before it is used is the idle-close race ``send`` already survives."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout_s
        count -= self.idle_count(origin)
        room = count if self.max_connections is None else self.max_connections - self._busy()

        async def one() -> None:
            self._opening += 1
            try:
                conn = await self._connect(loop, origin, deadline)
            finally:
                self._opening -= 1
            self._release(conn)

        opened = await asyncio.gather(
            *(one() for _ in range(max(min(count, room), 0))), return_exceptions=True
        )
        return sum(x is None for x in opened)

    def idle_count(self, origin: Origin) -> int:
        """Connections to ``origin`` kept alive and waiting for a request."""
        return sum(not c.closed for c in self._idle.get(origin, ()))

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        for conn in list(self._all):
            conn.abort()
        self._idle.clear()

    async def _acquire(self, origin: Origin, deadline: float, *, fresh: bool = False) -> Connection:
        """An idle connection to ``origin`` (unless ``fresh``), else a new one."""
        loop = asyncio.get_running_loop()
        while True:
            idle = None if fresh else self._idle.get(origin)
            while idle:
                conn = idle.pop()
                if not conn.closed and not conn.transport.is_closing():
                    conn.reused = True
                    return conn
            if self.max_connections is None or self._busy() < self.max_connections:
                break
            if not self._evict_idle():
                await self._free_slot(loop, deadline)
        self._opening += 1
        try:
            conn = await self._connect(loop, origin, deadline)
        except BaseException:
            self._opening -= 1
            self._wake_one()  # a failed connect frees its slot
            raise
        self._opening -= 1
        return conn

    def _busy(self) -> int:
        return len(self._all) + self._opening

    def _evict_idle(self) -> bool:
        """At the limit, close an idle connection (to another origin) to free a slot."""
        for idle in self._idle.values():
            if idle:
                conn = idle.pop(0)  # the longest idle
                self._all.discard(conn)  # its slot is free now, not when the loss is seen
                conn.abort()
                return True
        return False

    async def _free_slot(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """Wait until a connection is released or closed (FIFO), or time runs out."""
        waiter = loop.create_future()
        self._waiters.append(waiter)
        served = False
        try:
            async with asyncio.timeout_at(deadline):
                await waiter
            served = True
        except TimeoutError:
            raise timeout_error() from None
        finally:
            if not served and waiter.done() and not waiter.cancelled():
                self._wake_one()  # woken but leaving (timed out, cancelled): pass it on
            elif not waiter.done():
                waiter.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connect(
        self, loop: asyncio.AbstractEventLoop, origin: Origin, deadline: float
    ) -> Connection:
        tls = self._tls_context() if origin.scheme == "https" else None
        timeout = min(self.connect_timeout_s, max(deadline - loop.time(), 0))
        try:
            async with asyncio.timeout(timeout):
                where: dict[str, Any] = {"host": origin.host, "port": origin.port}
                if self.recv_buffer is not None:
                    where = {"sock": await self._small_socket(loop, origin)}
                _, conn = await loop.create_connection(
                    lambda: Connection(origin, release=self._release, lost=self._forget),
                    ssl=tls,
                    server_hostname=origin.host if tls else None,
                    **where,
                )
        except TimeoutError:
            raise timeout_error() from None
        except OSError as exc:
            message = f"cannot connect to the upstream: {_reason(exc)}"
            detail = f"{origin.host}:{origin.port}: {exc}"
            raise UpstreamError("upstream_connect", message, detail=detail) from None
        self._all.add(conn)
        return conn

    async def _small_socket(self, loop: asyncio.AbstractEventLoop, origin: Origin) -> socket.socket:
        """A socket connected to ``origin`` with ``recv_buffer`` set before the connect
        (the window offered in the handshake is scaled from it)."""
        infos = await loop.getaddrinfo(origin.host, origin.port, type=socket.SOCK_STREAM)
        if not infos:
            raise OSError(f"cannot resolve {origin.host}")
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.recv_buffer or 0)
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
        except BaseException:
            sock.close()
            raise
        return sock

    def _release(self, conn: Connection) -> None:
        idle = self._idle.setdefault(conn.origin, [])
        if len(idle) >= self.max_idle:
            conn.abort()
            return
        conn.keep_alive = False
        conn.idle_since = conn.loop.time()
        idle.append(conn)
        self._wake_one()
        if self._sweeper is None:
            self._sweeper = conn.loop.call_later(self.keepalive_s / 4, self._sweep)

    def _sweep(self) -> None:
        # One timer for the pool rather than one per idle connection (a timer set and
        # cancelled per request cost ~3% of a request's CPU).
        self._sweeper = None
        loop = asyncio.get_running_loop()
        cutoff = loop.time() - self.keepalive_s
        for idle in self._idle.values():
            while idle and idle[0].idle_since < cutoff:  # reused last in, first out:
                idle.pop(0).abort()  # the front is the longest idle
        if any(self._idle.values()):
            self._sweeper = loop.call_later(self.keepalive_s / 4, self._sweep)

    def _check_deadlines(self) -> None:
        # One timer for the pool, every _watch_s while requests are in flight, rather
        # than one set and cancelled a request (2 µs, in a replayed request's ~160 µs):
        # a request times out up to _watch_s after its deadline.
        self._watch = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        busy = False
        for conn in list(self._all):  # a timed-out connection leaves _all as it closes
            if conn.response is None:
                continue
            if conn.deadline <= now:
                conn.on_deadline()
            else:
                busy = True
        if busy:
            self._watch = loop.call_later(self._watch_s, self._check_deadlines)

    def _forget(self, conn: Connection) -> None:
        if conn in self._all:
            self._all.discard(conn)
            self._wake_one()
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls
