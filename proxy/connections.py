"""Client-connection hygiene: what keeps idle and slow clients from starving the proxy.

Four defences, as nginx and Envoy have them:

- **Timeouts.** A client has ``idle_timeout_s`` to send a complete request head,
  counted from when it connected or its last response ended (aiohttp's keep-alive
  timer, which also covers a head trickled a byte at a time). A request body has
  ``body_timeout_s`` between two reads, the request's ``--timeout`` in all, and a
  minimum pace (``proxy/request_body.py``).
- **A connection cap** below the open-file limit. Every client connection may
  need an upstream connection too, so the cap is half of what the limit leaves
  after a reserve for archives, pipes, the admin port and one accept batch. At the
  cap a newcomer pushes out the connection wasting its slot the most, or is
  refused with a 503 (``proxy/admission.py``): a normal client still gets in while
  thousands of idle or trickling sockets are open, and ``accept()`` never runs out
  of descriptors.
- **A cap per peer** (client IP, ``proxy/peers.py``): one peer holds at most its
  share of the cap; past it, it makes room among its own connections, by the same
  rules, or gets a 503.
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
from functools import partial
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_parser import HttpParser
from aiohttp.web_protocol import RequestHandler

from tailreplay.proxy.admission import ConnectionGuard
from tailreplay.proxy.last_request import LastRequestParser

__all__ = [
    "ACCEPT_BATCH",
    "FD_RESERVE",
    "LOG_EVERY_S",
    "GuardedServer",
    "RequestLog",
    "accept_error_handler",
    "connection_cap",
    "listening_sockets",
    "relisten",
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


class GuardedServer(web.Server):
    """aiohttp's low-level server with every connection admitted by a ``ConnectionGuard``."""

    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        # Bytes after a request with Connection: close are dropped, that request served.
        # (It stands in for aiohttp's parser: the same methods, every one passed on.)
        slot = self.guard.connected(handler, transport)
        watch = None if slot is None else partial(self.guard.fed, slot)
        handler._parser = cast("HttpParser[Any]", LastRequestParser(handler._parser, watch))

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        self.guard.lost(handler)
        super().connection_lost(handler, exc)


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
            # The kind only: aiohttp's message quotes the request's raw bytes (a bare-LF
            # request whole, with its Authorization header), which no log may hold.
            count, kind = self.guard.malformed, type(exc).__name__
            self.logger.warning(
                "malformed requests answered 400: %d so far (last: %s)", count, kind
            )
