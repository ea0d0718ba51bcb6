"""Client-connection hygiene: what keeps idle and slow clients from starving the proxy.

Four defences, as nginx and Envoy have them:

- **Timeouts.** A client has ``idle_timeout_s`` to send a complete request head,
  counted from when it connected or its last response ended (aiohttp's keep-alive
  timer, which also covers a head trickled a byte at a time). A request body
  (``read_body``, ``stream_body``) has ``body_timeout_s`` between two reads, the
  request's ``--timeout`` in all, and, past a grace of ``body_timeout_s``, must keep
  up ``MIN_BODY_RATE`` on average (Kestrel's ``MinRequestBodyDataRate``): a body
  trickled a byte at a time is answered 408 in seconds, not after ``--timeout``.
- **A connection cap** below the open-file limit. Every client connection may
  need an upstream connection too, so the cap is half of what the limit leaves
  after a reserve for archives, pipes, the admin port and one accept batch. At the
  cap a new connection evicts the client connection idle the longest (no request
  in progress; one that connected under ``NEWCOMER_S`` ago only after the next),
  else the one sending its request body the slowest, above ``MIN_BODY_RATE`` or
  not (an attacker can always send just above a floor), else that newcomer; a peer
  reconnecting in a storm gets only the first. A connection whose body is whole
  (waiting for or receiving its answer) is never closed. Otherwise the newcomer
  gets a 503 and is closed. A normal client therefore still gets in while
  thousands of idle or trickling sockets are open, and ``accept()`` never runs out
  of descriptors.
- **A cap per peer** (client IP, ``proxy/peers.py``): one peer holds at most its
  share of the cap; past it, its own longest-idle connection makes room, else its
  own slowest body, else it gets a 503.
- **No log flood.** Accept errors (out of descriptors or memory) and malformed
  requests (which aiohttp logs with a traceback each) are counted and logged
  once per ``LOG_EVERY_S``, without a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import math
import resource
import socket
import time
from collections.abc import AsyncIterator
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_parser import HttpParser
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

from tailreplay.proxy.forwarding import TrustedProxies
from tailreplay.proxy.last_request import LastRequestParser
from tailreplay.proxy.peers import PeerLimits, peer_cap, peer_of

__all__ = [
    "ACCEPT_BATCH",
    "FD_RESERVE",
    "LOG_EVERY_S",
    "MIN_BODY_RATE",
    "BodyLimits",
    "BodyPace",
    "BodyTimeout",
    "BodyTooLarge",
    "ConnectionGuard",
    "GuardedServer",
    "accept_error_handler",
    "connection_cap",
    "listening_sockets",
    "read_body",
    "relisten",
    "stream_body",
]

log = logging.getLogger("tailreplay.proxy")

FD_RESERVE = 64
"""Descriptors kept for archives, the recorder's pipes, the admin port and the loop."""
ACCEPT_BATCH = 128
"""Connections asyncio accepts in one go before any is admitted (its ``backlog`` argument)."""
LISTEN_BACKLOG = 4096
"""The kernel's accept queue (capped by net.core.somaxconn): a burst of connects waits
there for accept() instead of having its SYNs dropped and retried a second later."""
LOG_EVERY_S = 10.0

_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%b"
)
_REFUSED_BODY = (
    b'{"error":{"message":"the proxy is at its connection limit","type":"overloaded_error",'
    b'"param":null,"code":null}}'
)


def listening_sockets(
    host: str, port: int, *, reuse_port: bool, defer_s: float
) -> list[socket.socket]:
    """Bound, listening sockets for every address of ``host``, with a deep accept queue.

    asyncio accepts as many connections in one go as its ``backlog`` argument, and
    listens with it too; the sockets are made here so that the kernel's queue can be
    deep (``relisten``) while asyncio's batch stays ``ACCEPT_BATCH``. Where the
    system has it (Linux), a connection is handed to accept() only once its first
    bytes arrive or ``defer_s`` has passed (TCP_DEFER_ACCEPT, nginx's ``deferred``):
    sockets that connect and send nothing never reach the proxy before then, so a
    client with a request does not queue behind them.
    """
    sockets: list[socket.socket] = []
    seen: set[tuple[int, Any]] = set()
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    try:
        for family, _, _, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.create_server(
                address[:2], family=family, backlog=LISTEN_BACKLOG, reuse_port=reuse_port
            )
            sockets.append(sock)
            if hasattr(socket, "TCP_DEFER_ACCEPT"):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, math.ceil(defer_s))
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def relisten(sockets: list[socket.socket]) -> None:
    """Deepen the accept queue again after asyncio's ``listen(ACCEPT_BATCH)``."""
    for sock in sockets:
        sock.listen(LISTEN_BACKLOG)


def connection_cap(requested: int | None) -> tuple[int, str | None]:
    """The client-connection cap, and a warning when the open-file limit lowers it.

    The soft open-file limit is first raised to the hard one (as nginx's
    ``worker_rlimit_nofile`` does), since a proxy needs descriptors and most
    systems set a low soft limit only for interactive shells.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    # A batch of accepted sockets exists before the cap is applied to any of them.
    allowed = max((soft - FD_RESERVE - ACCEPT_BATCH) // 2, 1)
    if requested is None:
        return allowed, None
    if requested <= allowed:
        return requested, None
    return allowed, (
        f"--max-connections {requested}: the open-file limit ({soft}) allows {allowed}; "
        "raise it (ulimit -n, or LimitNOFILE= in a systemd unit) for more"
    )


class ConnectionGuard:
    """Tracks client connections, which are idle, and enforces the caps: all told,
    and per peer (``proxy/peers.py``)."""

    def __init__(
        self, cap: int, per_peer: int | None = None, trusted: TrustedProxies | None = None
    ) -> None:
        self.cap = cap
        # handler -> (transport, monotonic time it became idle, or None while busy);
        # insertion order is connection order, and idle ones are re-inserted when
        # they become idle, so the first idle entry is the one idle the longest.
        self._conns: dict[RequestHandler, tuple[asyncio.Transport, float | None]] = {}
        self._bodies: dict[RequestHandler, BodyPace] = {}
        """Connections sending a request body, and how fast."""
        self._peer: dict[RequestHandler, str] = {}
        self.peers = PeerLimits(peer_cap(cap, per_peer), trusted or TrustedProxies(()))
        self.evicted = 0
        self.slow_bodies_evicted = 0
        self.refused = 0
        self.peer_refused = 0
        """Connections refused because their peer held its share already."""
        self.storms_refused = 0
        """Of ``refused``, those of a peer reconnecting in a storm (``proxy/peers.py``)."""
        self.body_timeouts = 0
        self.accept_errors = 0
        self.malformed = 0
        """Requests aiohttp's parser refused (answered 400 by it, never reaching the proxy)."""

    @property
    def open(self) -> int:
        return len(self._conns)

    def connected(self, handler: RequestHandler, transport: asyncio.Transport) -> bool:
        """Admit a new connection, making room at the caps; False if refused."""
        peer = peer_of(transport)
        storming = self.peers.opened(peer)
        # A share as large as the cap is the cap's to enforce (and count).
        per_peer = self.peers.per_peer < self.cap
        if per_peer and self.peers.full(peer) and not self._evict_idle_of(peer):
            self.peer_refused += 1
            return self._refuse(transport)
        if len(self._conns) >= self.cap and not self._evict_one(storming):
            self.refused += 1
            return self._refuse(transport)
        self._conns[handler] = (transport, time.monotonic())
        self._peer[handler] = peer
        self.peers.add(peer)
        return True

    @staticmethod
    def _refuse(transport: asyncio.Transport) -> bool:
        transport.write(_REFUSED % (len(_REFUSED_BODY), _REFUSED_BODY))
        transport.close()
        return False

    def lost(self, handler: RequestHandler) -> None:
        self._forget(handler)

    def _forget(self, handler: RequestHandler) -> tuple[asyncio.Transport, float | None] | None:
        entry = self._conns.pop(handler, None)
        self._bodies.pop(handler, None)
        peer = self._peer.pop(handler, None)
        if peer is not None:
            self.peers.remove(peer)
        return entry

    def body(self, handler: RequestHandler) -> BodyPace:
        """The pace of the body ``handler`` starts sending now (dropped by ``idle``)."""
        pace = self._bodies[handler] = BodyPace(time.monotonic())
        return pace

    def busy(self, handler: RequestHandler) -> None:
        entry = self._conns.get(handler)
        if entry is not None:
            self._conns[handler] = (entry[0], None)

    def idle(self, handler: RequestHandler) -> None:
        self._bodies.pop(handler, None)
        entry = self._conns.pop(handler, None)
        if entry is not None:
            self._conns[handler] = (entry[0], time.monotonic())

    def _evict_idle_of(self, peer: str) -> bool:
        """A peer at its share makes room among its own connections: its longest idle,
        else the one sending its body the slowest."""
        for handler, (_, since) in self._conns.items():
            if since is not None and self._peer.get(handler) == peer:
                return self._close(handler)
        return self._evict_slowest_body(peer)

    def _close(self, handler: RequestHandler) -> bool:
        entry = self._forget(handler)
        if entry is None:
            return False
        self.evicted += 1
        entry[0].close()  # a response just written still flushes first
        return True

    def _evict_one(self, storming: bool) -> bool:
        """Make room at the cap, in this order: the connection idle the longest, unless
        it connected (or finished its last response) under ``NEWCOMER_S`` ago (a
        client whose head is still on its way, on a busy machine); the one sending its
        body the slowest; that newcomer. A peer reconnecting in a storm gets only the
        first: it would push clients out as fast as it reconnects. A connection whose
        body is whole (waiting for or receiving its answer) is never closed."""
        # Idle entries are in the order they became idle: the first is the oldest.
        oldest = next((h for h, (_, since) in self._conns.items() if since is not None), None)
        if oldest is not None:
            since = self._conns[oldest][1]
            assert since is not None
            if time.monotonic() - since >= NEWCOMER_S:
                return self._close(oldest)
        if storming:
            self.storms_refused += 1
            return False
        return self._evict_slowest_body() or (oldest is not None and self._close(oldest))

    def _evict_slowest_body(self, peer: str | None = None) -> bool:
        """Close the connection sending its body the slowest (judged after
        ``PACE_JUDGED_AFTER_S``; only ``peer``'s when given), above ``MIN_BODY_RATE`` or
        not: at the cap, a body sent at a few hundred bytes a second holds a slot a
        newcomer needs more, and an attacker can always send just above any floor."""
        now = time.monotonic()
        judged = [
            (pace.rate(now), h)
            for h, pace in self._bodies.items()
            if pace.judged(now) and (peer is None or self._peer.get(h) == peer)
        ]
        if not judged:
            return False
        _, handler = min(judged, key=lambda item: item[0])
        entry = self._forget(handler)
        if entry is None:
            return False
        self.slow_bodies_evicted += 1
        entry[0].close()
        return True


class GuardedServer(web.Server):
    """aiohttp's low-level server with every connection admitted by a ``ConnectionGuard``."""

    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        # Bytes after a request with Connection: close are dropped, that request served.
        # (It stands in for aiohttp's parser: the same methods, every one passed on.)
        handler._parser = cast("HttpParser[Any]", LastRequestParser(handler._parser))
        self.guard.connected(handler, transport)

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        self.guard.lost(handler)
        super().connection_lost(handler, exc)


class BodyTimeout(Exception):
    """A request body came too slowly: nothing for ``body_timeout_s``, under
    ``MIN_BODY_RATE`` past its grace, or not whole within the request's deadline."""


MIN_BODY_RATE = 240.0
"""Bytes a second a request body must average once past its grace (Kestrel's default
``MinRequestBodyDataRate``): a slow mobile link sends kilobytes a second."""
NEWCOMER_S = 1.0
"""An idle connection younger than this is evicted after a slow body, not before."""
PACE_JUDGED_AFTER_S = 1.0
"""A body's pace is judged for eviction only after this long (one read may lag)."""


class BodyPace:
    """How much of a request body has come since it started."""

    __slots__ = ("done", "received", "started")

    def __init__(self, started: float) -> None:
        self.started = started
        self.received = 0
        self.done = False
        """The whole body came: the pace no longer matters (a long answer may follow)."""

    def rate(self, now: float) -> float:
        return self.received / max(now - self.started, 1e-9)

    def judged(self, now: float) -> bool:
        """Whether the body is still coming and has come long enough to be judged."""
        return not self.done and now - self.started >= PACE_JUDGED_AFTER_S


class BodyTooLarge(Exception):
    """A request body ran past ``--max-body``."""


class BodyLimits:
    """The bounds of one request body: ``limit`` bytes, ``timeout_s`` between reads,
    ``deadline_s`` in all, ``MIN_BODY_RATE`` on average after a grace of ``timeout_s``;
    progress goes to ``pace`` (the connection guard's, for eviction)."""

    __slots__ = ("deadline_s", "limit", "pace", "timeout_s")

    def __init__(
        self, limit: int, timeout_s: float, deadline_s: float, pace: BodyPace | None = None
    ) -> None:
        self.limit, self.timeout_s, self.deadline_s = limit, timeout_s, deadline_s
        self.pace = pace if pace is not None else BodyPace(time.monotonic())


async def _chunk(content: StreamReader, bounds: BodyLimits) -> bytes:
    """The next piece of the body, within the bounds: the wait is cut where the next
    one would be broken (the pause, the deadline, or the pace past its grace)."""
    pace = bounds.pace
    now = time.monotonic()
    elapsed = now - pace.started
    # The time by which the average must be back to MIN_BODY_RATE with no more bytes.
    pace_due = max(pace.received / MIN_BODY_RATE, bounds.timeout_s) - elapsed
    wait = min(bounds.timeout_s, bounds.deadline_s - elapsed, pace_due)
    if wait <= 0:
        raise BodyTimeout
    # What has come already needs no timer: a small body is usually whole by the
    # time its handler runs, and a timer set and cancelled per read cost ~9% of a
    # request's CPU in the proxy.
    chunk = content.read_nowait()
    if not chunk and not content.at_eof():
        try:
            async with asyncio.timeout(wait):
                chunk = await content.readany()
        except TimeoutError:
            raise BodyTimeout from None
    pace.received += len(chunk)
    pace.done = not chunk
    if pace.received > bounds.limit:
        raise BodyTooLarge
    return chunk


async def read_body(content: StreamReader, bounds: BodyLimits) -> bytes:
    """The whole body, within ``bounds``."""
    parts: list[bytes] = []
    while chunk := await _chunk(content, bounds):
        parts.append(chunk)
        if content.at_eof():  # the end came with it: no read needed to learn so
            bounds.pace.done = True
            break
    return b"".join(parts)


async def stream_body(content: StreamReader, bounds: BodyLimits) -> AsyncIterator[bytes]:
    """The body as it comes (for the upstream), within the same bounds as ``read_body``."""
    while chunk := await _chunk(content, bounds):
        yield chunk


def accept_error_handler(guard: ConnectionGuard) -> Any:
    """A loop exception handler: accept errors counted and logged at most once per
    ``LOG_EVERY_S`` without a traceback; everything else as asyncio logs it."""
    last = [0.0]

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", ""))
        if not message.startswith("socket.accept()"):
            loop.default_exception_handler(context)
            return
        guard.accept_errors += 1
        now = time.monotonic()
        if now - last[0] >= LOG_EVERY_S:
            last[0] = now
            exc = context.get("exception")
            log.error(
                "cannot accept connections: %s (%d times so far; retrying)",
                getattr(exc, "strerror", None) or exc or message,
                guard.accept_errors,
            )

    return handle


class RequestLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The logger aiohttp's server gets: a malformed request (a bad chunk size, a
    header line without a colon) is counted and logged once per ``LOG_EVERY_S``
    without its traceback; anything else (a bug in a handler) goes through whole."""

    def __init__(self, guard: ConnectionGuard) -> None:
        super().__init__(logging.getLogger("tailreplay.proxy"), {})
        self.guard = guard
        self._logged_at = -math.inf

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info")
        if not isinstance(exc, HttpProcessingError):
            super().log(level, msg, *args, **kwargs)
            return
        self.guard.malformed += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            count, why = self.guard.malformed, exc.message
            self.logger.warning("malformed requests answered 400: %d so far (%s)", count, why)
