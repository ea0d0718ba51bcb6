"""One HTTP/1.1 connection of the shared client (``tailreplay.http.client``): an
asyncio Protocol with an llhttp parser (httptools), and the response in flight on
it, whose body bytes go to a consumer inside the callback that read them; and what
the pool shares with its connections: where a request goes (``Origin``), what
failing to talk to it raises, and what takes a body as it arrives. The pool imports
the connection, and nothing here imports back.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Callable
from typing import NamedTuple, TypeAlias

import httptools

log = logging.getLogger("tailreplay.http")

__all__ = [
    "MALFORMED",
    "MAX_HEADER_LINES",
    "MAX_HEAD_BYTES",
    "MAX_INFORMATIONAL",
    "BodyConsumer",
    "Connection",
    "Origin",
    "StaleConnection",
    "UpstreamError",
    "UpstreamResponse",
    "timeout_error",
]

MALFORMED = "malformed response"
"""How a ``bad_response`` that llhttp refused (not HTTP/1.x) begins its message."""

BodyConsumer: TypeAlias = Callable[[bytes], bool]
"""Takes body bytes as they arrive; returns False to stop reading until resumed."""


class Origin(NamedTuple):
    scheme: str
    host: str
    port: int

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 literal
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


class UpstreamError(Exception):
    """Talking to the upstream failed; ``kind`` is the record's error name.

    ``message`` is for the client and never names the upstream (its address is the
    operator's business); ``detail`` is for the proxy's log.
    """

    def __init__(self, kind: str, message: str, status: int = 502, detail: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.detail = detail


def timeout_error() -> UpstreamError:
    """The error of an exchange past the pool's timeout (connect or answer)."""
    return UpstreamError("upstream_timeout", "the upstream did not answer in time", 504)


class StaleConnection(Exception):
    """A reused connection was closed before any answer: safe to send again. The
    connection fails its response with it; the pool catches it and never lets it out."""


MAX_HEAD_BYTES = 64 * 1024
"""A response head (status line and header lines) larger than this is refused, as
nginx refuses an upstream's past ``proxy_buffer_size`` (4-8 KiB by default)."""
MAX_HEADER_LINES = 256
MAX_INFORMATIONAL = 8
"""1xx heads (``100 Continue``, ``103 Early Hints``) taken before an answer's final
head; a peer sending more is refused. Without a bound, a flood of them costs a parse
and a callback each, forever, and never counts as a byte of the answer."""


class _BadHead(Exception):
    """Raised from a parser callback: a response head this client does not take."""


class _HeadTooLarge(_BadHead):
    """The response head is past its bounds."""


class _Unasked(Exception):
    """Raised from a parser callback: a message after the answer, which no request
    asked for (a second response in the same read, or before the next request)."""


def _check_codings(headers: list[tuple[str, str]]) -> None:
    """Refuse a transfer coding other than chunked (``gzip, chunked``): it belongs to
    this hop only, so its bytes would go on with nothing to say they are compressed,
    and a body's size and timing would be the compressed stream's."""
    for name, value in headers:
        if name.lower() == "transfer-encoding":
            codings = [c.strip().lower() for c in value.split(",") if c.strip()]
            other = [c for c in codings if c != "chunked"]
            if other:
                raise _BadHead(f"a transfer coding other than chunked ({', '.join(other)})")


class UpstreamResponse:
    """One response in flight: its head, then its body pushed to a consumer.

    Body bytes that arrive before the consumer is attached (usually the first
    event, in the same packet as the head) are held and handed over by ``start``.
    """

    def __init__(self, conn: Connection, method: str) -> None:
        self._conn = conn
        self.head_only = method == "HEAD"
        self.status = 0
        self.reason = ""
        self.headers: list[tuple[str, str]] = []
        self.got_bytes = False
        self.complete = False
        self.sent_ns = 0
        """``time.monotonic_ns()`` when the request's head and in-memory body were
        written: the exchange's times count from there."""
        self._head: asyncio.Future[None] = conn.loop.create_future()
        self._waiter: asyncio.Future[bool] | None = None
        self._held: list[bytes] = []
        self._consumer: BodyConsumer | None = None
        self._error: Exception | None = None
        self._paused = False

    @property
    def head_arrived(self) -> asyncio.Future[None]:
        """Done when the head has arrived; raises what failed the exchange before it."""
        return self._head

    # The relay's side.

    def take_held(self) -> list[bytes]:
        """The body bytes that arrived so far, before any consumer was attached."""
        held, self._held = self._held, []
        return held

    def start(self, consumer: BodyConsumer) -> None:
        """Attach the consumer; bytes held since are given to it now."""
        self._consumer = consumer
        held, self._held = self._held, []
        for chunk in held:
            if not consumer(chunk):
                self._pause()

    async def wait(self) -> bool:
        """True once the body has ended; False when the consumer asked for a pause.

        Raises ``UpstreamError`` if the upstream failed or timed out.
        """
        if self._error is not None:
            raise self._error
        if self.complete:
            return True
        if self._paused:
            return False
        self._waiter = self._conn.loop.create_future()
        try:
            return await self._waiter
        finally:
            self._waiter = None

    @property
    def failed(self) -> bool:
        return self._error is not None

    def resume(self) -> None:
        if self._paused and not self._conn.closed:
            self._paused = False
            self._conn.transport.resume_reading()

    def close(self) -> None:
        """Done with this response. Unfinished, its connection is dropped, which is
        how the upstream learns the request was abandoned."""
        if self.complete:
            self.resume()  # a connection goes back to the pool reading
        self._conn.finish(self, reusable=self.complete)
        # The consumer is usually a method of an object that holds this response: a
        # cycle left to the collector, whose walks stall the loop (a replay made one
        # a request). No more bytes come once finished, so the link can go.
        self._consumer = None

    # The connection's side.

    def _on_head(self) -> None:
        if not self._head.done():
            self._head.set_result(None)

    def _on_body(self, chunk: bytes) -> None:
        if self._consumer is None:
            self._held.append(chunk)
        elif not self._consumer(chunk):
            self._pause()

    def _pause(self) -> None:
        if not self._paused:
            self._paused = True
            self._conn.transport.pause_reading()
            self._wake(False)

    def _on_complete(self) -> None:
        self.complete = True
        self._wake(True)

    def _fail(self, error: Exception) -> None:
        if self.complete or self._error is not None:
            return
        self._error = error
        if not self._head.done():
            self._head.set_exception(error)
            self._head.exception()  # retrieved: a failure before the head is raised by send
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)

    def _wake(self, value: bool) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(value)


class Connection(asyncio.Protocol):
    """One keep-alive connection to one origin; llhttp calls the ``on_*`` methods.

    Its pool hands in what to call when the connection is free for another request
    (``release``) and when it is gone (``lost``): the connection knows no pool.
    """

    def __init__(
        self,
        origin: Origin,
        *,
        release: Callable[[Connection], None],
        lost: Callable[[Connection], None],
    ) -> None:
        self.origin = origin
        self._release = release
        self._lost = lost
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set on connect
        self.parser = httptools.HttpResponseParser(self)
        self.response: UpstreamResponse | None = None
        self.closed = False
        self.keep_alive = False
        self.reused = False
        self.idle_since = 0.0
        self.deadline = math.inf
        """When the response in flight times out (``loop.time()``; the pool watches it)."""
        self._informational = False
        self._informational_seen = 0
        """1xx heads read before the answer in flight's final head."""
        self._reason = b""
        self._headers: list[tuple[str, str]] = []
        self._head_bytes = 0
        self._raw_head = 0
        """Bytes read while the answer's head (1xx heads included) is incomplete: the
        parser's callbacks never see the blanks around values, which could pad a head
        without bound."""
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._lead = b""
        """The answer's first bytes, up to five: its status line must begin ``HTTP/``
        (llhttp also reads ``RTSP/1.0 200`` and ``ICE/1.0 200`` as answers)."""

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None:  # bytes nobody asked for: the connection is not usable
            self.abort()
            return
        response.got_bytes = True
        head_pending = not response._head.done()
        if len(self._lead) < 5:
            self._lead += data[: 5 - len(self._lead)]
            if not b"HTTP/".startswith(self._lead):
                response._fail(
                    UpstreamError("bad_response", f"{MALFORMED}: not an HTTP status line")
                )
                self.abort()
                return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _Unasked):
                # The answer stands as it was read; what came after it would be read
                # as the next request's answer, so the connection is dropped.
                self.keep_alive = False
                self.abort()
                return
            if isinstance(exc.__context__, _BadHead):
                response._fail(UpstreamError("bad_response", str(exc.__context__)))
                self.abort()
                return
            # One of our callbacks (the relay's consumer among them) raised: a bug
            # here, not the upstream's fault, but still only this request's failure.
            log.error("proxy bug while relaying a response", exc_info=exc.__context__)
            response._fail(UpstreamError("upstream_error", "the proxy failed to relay it"))
            self.abort()
        except httptools.HttpParserError as exc:
            # Not HTTP as RFC 9112 frames it (a garbage status line, HTTP/0.9, a broken
            # chunk): the answer is not one the API gives, whatever its status said.
            response._fail(UpstreamError("bad_response", f"{MALFORMED}: {exc}"))
            self.abort()
            return
        if head_pending and not response._head.done():
            self._raw_head += len(data)
            if self._raw_head > MAX_HEAD_BYTES:
                too_large = f"a response head over {MAX_HEAD_BYTES // 1024} KiB"
                response._fail(UpstreamError("bad_response", too_large))
                self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._can_write.set()
        self._lost(self)
        response = self.response
        if response is None or response.complete:
            return
        if response._head.done() and exc is None and self._ends_at_close():
            response._on_complete()  # a body delimited by a clean end of the connection
        elif not response.got_bytes and self.reused:
            response._fail(StaleConnection())
        elif response._head.done():
            response._fail(UpstreamError("upstream_reset", "the upstream reset the stream"))
        else:
            message = "the upstream closed the connection"
            response._fail(UpstreamError("upstream_error", message, detail=str(exc or "")))

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # httptools callbacks

    def on_message_begin(self) -> None:
        response = self.response
        if response is not None and response.complete:
            # llhttp parses on past the answer's end within one read: a second message
            # would overwrite the answer's status and headers before they are relayed.
            raise _Unasked

    def on_status(self, status: bytes) -> None:
        self._reason += status  # may come in pieces when the line is split across reads
        self._grow(len(status))

    def on_header(self, name: bytes, value: bytes) -> None:
        # _grow's test, inline: a response's every header line comes through here.
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _HeadTooLarge(f"a response head over {MAX_HEAD_BYTES // 1024} KiB")
        headers = self._headers
        if len(headers) >= MAX_HEADER_LINES:
            raise _HeadTooLarge(f"a response head of more than {MAX_HEADER_LINES} header lines")
        headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def _grow(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _HeadTooLarge(f"a response head over {MAX_HEAD_BYTES // 1024} KiB")

    def on_headers_complete(self) -> None:
        response = self.response
        assert response is not None
        status = self.parser.get_status_code()
        if 100 <= status < 200:
            # 100 Continue and friends precede the real answer; 101 would switch
            # protocols, which a request we built never asks for.
            self._informational = True
            if status == 101:
                raise _BadHead("the upstream switched protocols")
            self._informational_seen += 1
            if self._informational_seen > MAX_INFORMATIONAL:
                raise _HeadTooLarge(f"more than {MAX_INFORMATIONAL} informational responses")
            return
        version = self.parser.get_http_version()
        if not 200 <= status <= 599 or version not in ("1.1", "1.0"):
            raise _BadHead(f"{MALFORMED}: HTTP/{version} {status:03d} is not an HTTP/1.x answer")
        _check_codings(self._headers)
        response.status = status
        response.reason = self._reason.decode("latin-1")
        response.headers = self._headers
        # Fields after the body (a chunked trailer) go to a list of their own, bounded
        # like the head's and dropped: never among the head's, already relayed or not.
        self._headers = []
        response._on_head()
        if response.head_only:
            # llhttp cannot be told that a HEAD answer has no body, so the message ends
            # here and the connection is not reused.
            response._on_complete()
            self.abort()

    def on_body(self, body: bytes) -> None:
        response = self.response
        assert response is not None
        if not response.complete:
            response._on_body(body)

    def on_message_complete(self) -> None:
        self._reason, self._headers, self._head_bytes = b"", [], 0
        if self._informational:
            self._informational = False
            return
        self._lead = b""  # the next answer on this connection is checked again
        self._raw_head = self._informational_seen = 0
        assert self.response is not None
        # Read now: llhttp resets its flags for the next message once this returns.
        self.keep_alive = self.parser.should_keep_alive()
        self.response._on_complete()

    # the pool's side

    def _ends_at_close(self) -> bool:
        # Neither a length nor chunked last among the codings (RFC 9112 §6.3): the body
        # runs until the upstream closes.
        assert self.response is not None
        length = coding = None
        for name, value in self.response.headers:
            lower = name.lower()
            if lower == "content-length":
                length = value
            elif lower == "transfer-encoding":
                coding = value.rsplit(",", 1)[-1].strip().lower()
        return length is None and coding != "chunked"

    def write(self, request: bytes) -> None:
        """A whole request (head and body in memory): one segment for the usual small one."""
        self.transport.write(request)

    async def send(self, head: bytes, body: AsyncIterator[bytes], chunked: bool) -> None:
        """A request whose body comes as it is read, with backpressure."""
        self.transport.write(head)
        async for chunk in body:
            if self.closed:
                return  # the upstream already answered (or went away); its answer stands
            if chunk:
                self.transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
            await self._can_write.wait()
        if chunked and not self.closed:
            self.transport.write(b"0\r\n\r\n")

    def finish(self, response: UpstreamResponse, reusable: bool) -> None:
        if self.response is not response:
            return
        self.response = None
        self.deadline = math.inf
        if reusable and self.keep_alive and not self.closed:
            self._release(self)
        else:
            self.abort()

    def on_deadline(self) -> None:
        if self.response is not None:
            self.response._fail(timeout_error())
        self.abort()

    def abort(self) -> None:
        if not self.closed:
            self.closed = True
            self.transport.abort()
