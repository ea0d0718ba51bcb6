"""The forwarding handler: one request in, the same request upstream, the response back.

Streams both ways: the response goes to the client chunk by chunk as it arrives,
written from the upstream connection's read callback (``tailreplay/http/client.py``), so
time to first token is the upstream's plus a socket write; bytes pass as they are
both ways (no decompression: a compressed request body is the recorder's to decode,
``proxy/content_coding.py``). Only configured upstreams are ever contacted
(``proxy/targets.py``), and CONNECT and absolute-form targets are refused first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

from tailreplay.dialects import dialect_for, route_label
from tailreplay.http.client import UpstreamError, UpstreamPool, UpstreamResponse
from tailreplay.http.header_rules import PROBE_HEADER
from tailreplay.proxy.admission import ConnectionGuard
from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.connections import LOG_EVERY_S, GuardedServer, RequestLog
from tailreplay.proxy.content_coding import encoded
from tailreplay.proxy.dot_segments import PATH_OUTSIDE
from tailreplay.proxy.exchange import Exchange, Sink
from tailreplay.proxy.forwarding import Forwarding, TrustedProxies, forwarding
from tailreplay.proxy.headers import (
    request_headers_recorded,
    request_headers_upstream,
    response_headers_downstream,
)
from tailreplay.proxy.openai import SseRelay, with_usage_requested
from tailreplay.proxy.request_body import (
    BodyLimits,
    BodyTimeout,
    BodyTooLarge,
    read_body,
    stream_body,
)
from tailreplay.proxy.response_head import Framing, relay_head
from tailreplay.proxy.shadow import Shadow
from tailreplay.proxy.targets import OutsideBase, Targets
from tailreplay.tracecontext import new_span_id, new_trace_id, parse_traceparent

__all__ = ["build_server", "upstream_pool"]

log = logging.getLogger("tailreplay.proxy")

LINGER_S = 2.0


def _json_error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": None}}, status=status
    )


def build_server(
    config: ProxyConfig,
    sinks: Sequence[Sink],
    pool: UpstreamPool,
    guard: ConnectionGuard,
    shadow: Shadow | None = None,
) -> web.Server:
    """The proxy's HTTP server: aiohttp's low-level server, every request to one handler.

    A reverse proxy has one route, so the Application layer — router, middleware
    chain, per-request match info — would be pure cost: about 5% of a request's CPU
    (bench/proxy.py). Connections are admitted and timed out by ``guard``
    (``proxy/connections.py``).
    """
    forwarder = _Forwarder(config, list(sinks), pool, guard, shadow)

    def make_request(
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        guard.busy(protocol)  # a whole head arrived: not idle until its response is out
        return web.BaseRequest(
            message,
            payload,
            protocol,
            writer,
            task,
            task.get_loop(),
            client_max_size=config.max_body,
        )

    return GuardedServer(
        forwarder.handle,
        request_factory=make_request,
        handler_cancellation=True,
        access_log=None,
        # Idle keep-alive, and the time to send a whole head (aiohttp's timer runs
        # from the connection or the last response until a head is complete).
        keepalive_timeout=config.idle_timeout_s,
        # After an early answer (413, 408) the rest of a body is read and discarded
        # for this long, so the client sees the answer rather than a reset.
        lingering_time=LINGER_S,
        logger=RequestLog(guard),
        guard=guard,
        # aiohttp inflates gzip and deflate request bodies by default (and refuses
        # codings it cannot inflate with a 400): the upstream would get the inflated
        # bytes still labelled with their Content-Encoding.
        auto_decompress=False,
    )


def upstream_pool(config: ProxyConfig) -> UpstreamPool:
    """The one upstream client: pooled keep-alive connections, bytes passed as they are."""
    return UpstreamPool(timeout_s=config.timeout_s, connect_timeout_s=min(config.timeout_s, 10))


class _Forwarder:
    def __init__(
        self,
        config: ProxyConfig,
        sinks: list[Sink],
        pool: UpstreamPool,
        guard: ConnectionGuard,
        shadow: Shadow | None,
    ) -> None:
        self.config = config
        self.shadow = shadow
        self.guard = guard
        self._logged: dict[str, float] = {}  # error kind -> when last logged
        self.sinks = sinks
        self.pool = pool
        self.trusted = TrustedProxies(config.trusted_proxies)
        self._target = Targets(config)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            response = await self._exchange(request)
            # An answer made here (not relayed) is written out here, so that the
            # connection is idle (and may be evicted at the cap, with a graceful
            # close) only once its response is on its way.
            if not response.prepared:
                with contextlib.suppress(ConnectionResetError):
                    await response.prepare(request)
                    await response.write_eof()
            return response
        finally:
            self.guard.idle(request.protocol)

    async def _exchange(self, request: web.BaseRequest) -> web.StreamResponse:
        # A forward-proxy request is refused before anything else, never resolved.
        if request.method == "CONNECT" or not request.raw_path.startswith("/"):
            return _json_error(
                400,
                "this is a reverse proxy: absolute-form targets and CONNECT are refused",
                "invalid_request_error",
            )
        t0 = time.monotonic_ns()
        header = request.headers.get("traceparent")
        incoming = parse_traceparent(header) if header is not None else None
        if incoming is not None:
            trace_id, flags = incoming.trace_id, incoming.flags
        else:
            trace_id, flags = new_trace_id(), 1
        peer = request.remote
        forwarded = forwarding(
            request.headers,
            peer=peer,
            trusted=peer in self.trusted,
            scheme=request.scheme,
            host=request.host,
        )
        ex = Exchange(
            trace_id=trace_id,
            span_id=new_span_id(),
            parent_span_id=incoming.span_id if incoming else None,
            start_ns=time.time_ns(),
            t0_ns=t0,
            method=request.method,
            path=request.raw_path,
            route=route_label(request.raw_path),
            headers=request_headers_recorded(request.headers, forwarded),
            probe=PROBE_HEADER in request.headers,
        )
        for sink in self.sinks:
            sink.on_request(ex)
        try:
            return await self._forward(request, ex, flags, forwarded)
        except asyncio.CancelledError:
            if not _stream_ended(ex):
                ex.error = ex.error or "client_abort"
            raise
        finally:
            ex.finish(time.monotonic_ns())
            for sink in self.sinks:
                sink.on_complete(ex)

    async def _forward(
        self, request: web.BaseRequest, ex: Exchange, flags: int, forwarded: Forwarding
    ) -> web.StreamResponse:
        try:
            target = self._target(request.raw_path)
        except OutsideBase:
            ex.status, ex.error = 400, PATH_OUTSIDE
            return _json_error(
                400,
                "the path's dot-segments lead outside the upstream's base path",
                "invalid_request_error",
            )
        if target is None:
            ex.status = 400
            return _json_error(
                400, "no configured upstream serves this path", "invalid_request_error"
            )
        length = request.content_length  # parsed from the header at every read
        if length is not None and length > self.config.max_body:
            return self._too_large(ex)
        headers = request_headers_upstream(request.headers, forwarded)
        # Our span is the upstream's parent: its spans nest under the proxy's.
        headers.append(("traceparent", f"00-{ex.trace_id.hex()}-{ex.span_id.hex()}-{flags:02x}"))
        if (tracestate := request.headers.get("tracestate")) is not None:
            headers.append(("tracestate", tracestate))
        origin, path = target
        try:
            data = await self._body(request, ex)
            if self.shadow is not None:
                # Scheduled, not run: the copy starts once this request has been written
                # upstream and waits for its answer (a whole answer, when not streamed).
                self._copy(self.shadow, ex, headers)
            upstream = await self.pool.send(
                origin, request.method, path, headers, data, content_length=length
            )
        except BodyTooLarge:
            return self._too_large(ex)
        except BodyTimeout:
            self.guard.body_timeouts += 1
            ex.error, ex.status = "client_timeout", 408
            response = _json_error(408, "request body timed out", "invalid_request_error")
            response.force_close()  # mid-body: the connection cannot carry another request
            return response
        except UpstreamError as exc:
            ex.error, ex.status = exc.kind, exc.status
            self._log_upstream(exc)
            return _json_error(exc.status, exc.message, exc.kind)
        try:
            return await self._relay(request, upstream, ex)
        finally:
            upstream.close()

    @staticmethod
    def _copy(shadow: Shadow, ex: Exchange, headers: list[tuple[str, str]]) -> None:
        """A copy to ``--shadow`` of a sampled generating request on a known route (its
        body as the client sent it), started apart from this one (``proxy/shadow.py``)."""
        body = ex.req_body
        if body is None or ex.method != "POST" or ex.probe or dialect_for(ex.path) is None:
            return
        if shadow.wants(ex.trace_id):
            shadow.copy(ex, body, headers)

    def _log_upstream(self, exc: UpstreamError) -> None:
        # One line per kind of failure per LOG_EVERY_S: a dead upstream fails every
        # request, and the log must stay readable.
        now = time.monotonic()
        if now - self._logged.get(exc.kind, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[exc.kind] = now
            detail = f" ({exc.detail})" if exc.detail else ""
            log.warning("upstream: %s%s", exc.message, detail)

    def _too_large(self, ex: Exchange) -> web.Response:
        ex.status = 413
        return _json_error(
            413, f"request body over {self.config.max_body} bytes", "invalid_request_error"
        )

    async def _body(
        self, request: web.BaseRequest, ex: Exchange
    ) -> bytes | AsyncIterator[bytes] | None:
        """What to send upstream: a known route's body read whole (the recorder needs it,
        and the proxy may ask for usage in it), as is any body the record keeps
        (``--bodies redacted|full``); any other body streamed as it comes.
        Both are bounded by --max-body, --body-timeout between reads, --timeout in all
        and a minimum pace (``proxy/connections.py``)."""
        if not request.can_read_body:
            return None
        if (
            request.version >= (1, 1)
            and request.headers.get("Expect", "").lower() == "100-continue"
        ):
            _continue(request)
        config = self.config
        pace = self.guard.body(request.protocol, request.content_length, request.content)
        bounds = BodyLimits(config.max_body, config.body_timeout_s, config.timeout_s, pace)
        known = dialect_for(request.raw_path) is not None
        if known or config.bodies != "none":
            raw = await read_body(request.content, bounds)
            ex.bytes_in = len(raw)
            ex.req_body = raw
            # Compressed bytes cannot be edited: they go as the client sent them.
            inject = (
                known
                and self.config.inject_usage
                and not encoded(request.headers.getall("Content-Encoding", ()))
            )
            changed = with_usage_requested(request.raw_path, raw) if inject else None
            ex.injected_usage = changed is not None
            return changed if changed is not None else raw
        return _counted(stream_body(request.content, bounds), ex)

    async def _relay(
        self, request: web.BaseRequest, upstream: UpstreamResponse, ex: Exchange
    ) -> web.StreamResponse:
        relay = _read_head(upstream, ex)
        made = relay_head(
            request.version,
            request.method,
            upstream.status,
            upstream.reason,
            response_headers_downstream(upstream.headers, keep_length=relay is None),
            keep_alive=request.keep_alive,
        )
        if made is None:
            ex.error, ex.status = "bad_response", 502
            return _json_error(
                502, "the upstream's response head cannot be relayed", "bad_response"
            )
        head, framing = made
        client = request.transport
        if client is None or client.is_closing():
            ex.error = "client_abort"
            return _Relayed(upstream.status, keep_alive=False)
        to_client = _ToClient(ex, client, self.sinks, relay, framing)
        try:
            await _pump(head, upstream, to_client)
        except UpstreamError as exc:
            cut = exc.kind in ("upstream_timeout", "bad_response")  # else the stream broke
            ex.error = exc.kind if cut else "upstream_reset"
            _abort(request)  # the client must see a broken response, not a short one
            return _Relayed(upstream.status, keep_alive=False)
        if to_client.gone:
            if not _stream_ended(ex):
                ex.error = "client_abort"
            return _Relayed(upstream.status, keep_alive=False)
        ex.duration_ns = time.monotonic_ns() - ex.t0_ns
        return _Relayed(upstream.status, keep_alive=framing.keep_alive)


async def _counted(body: AsyncIterator[bytes], ex: Exchange) -> AsyncIterator[bytes]:
    """A streamed body, its bytes counted as they pass (a chunked upload declares no
    length; one cut short sent less than it declared)."""
    async for chunk in body:
        ex.bytes_in += len(chunk)
        yield chunk


def _read_head(upstream: UpstreamResponse, ex: Exchange) -> SseRelay | None:
    """What the record takes from the upstream's head; the relay that strips the usage
    the proxy asked for from a stream, when it asked."""
    is_sse = ex.read_head(upstream.status, upstream.headers)
    return SseRelay() if is_sse and ex.injected_usage else None


async def _pump(head: bytes, upstream: UpstreamResponse, to_client: _ToClient) -> None:
    """The response to the client: the head and what came with it (usually the first
    event) in one write, one wake-up of the client instead of two; then the body as
    it is read. Returns early if the client left."""
    first = b"".join([to_client.note(chunk) for chunk in upstream.take_held()])
    to_client.write(first, head)
    upstream.start(to_client)
    while not await upstream.wait():
        # The client reads slower than the upstream writes: the upstream connection
        # stays paused until the client's socket buffer drains. Polled: the body
        # bypasses aiohttp's writer, whose drain() would wait. Only slow clients
        # come here; one that never reads is cut off by --timeout, which fails the
        # upstream.
        while not to_client.gone and not upstream.failed and to_client.backlogged():
            await asyncio.sleep(0.005)
        if to_client.gone:
            return
        upstream.resume()
    if not to_client.gone:
        to_client.end()


class _Relayed(web.StreamResponse):
    """A response the proxy wrote to the client itself (``proxy/response_head.py``):
    aiohttp only reads from it whether the connection stays open."""

    def __init__(self, status: int, *, keep_alive: bool) -> None:
        super().__init__(status=status)
        self._keep_alive = keep_alive
        self._eof_sent = True  # nothing left for aiohttp to prepare or write


class _ToClient:
    """Takes the upstream's body bytes as they are read and writes them to the client.

    Called from the upstream connection's read callback, so it must not block: it
    notes the timing, feeds the tap, writes to the client's transport, and answers
    whether the upstream may keep reading (False once the client's socket buffer
    is over its high-water mark). The body's framing (chunks, or bytes as they are)
    is the head's (``proxy/response_head.py``).
    """

    __slots__ = ("client", "ex", "framing", "gone", "high", "low", "relay", "sinks")

    def __init__(
        self,
        ex: Exchange,
        client: asyncio.Transport,
        sinks: list[Sink],
        relay: SseRelay | None,
        framing: Framing,
    ) -> None:
        self.ex = ex
        self.client = client
        self.sinks = sinks
        self.relay = relay
        self.framing = framing
        self.low, self.high = client.get_write_buffer_limits()
        self.gone = False

    def __call__(self, chunk: bytes) -> bool:
        self.write(self.note(chunk))
        return not self.gone and self.client.get_write_buffer_size() <= self.high

    def note(self, chunk: bytes) -> bytes:
        """Time and tap a chunk; returns what the client is to get of it."""
        ex = self.ex
        if chunk:
            now = time.monotonic_ns()
            if ex.timeline is not None:
                ex.timeline.feed(chunk, now)  # TTFT and gaps: token events only
            elif ex.ttfb_ns is None:
                ex.ttfb_ns = now - ex.t0_ns
            assert ex.tap is not None
            ex.tap.feed(chunk)
        for sink in self.sinks:
            sink.on_chunk(ex, len(chunk))
        return self.relay.feed(chunk) if self.relay is not None else chunk

    def backlogged(self) -> bool:
        if self.client.is_closing():
            self.gone = True
        return self.client.get_write_buffer_size() > self.low

    def write(self, out: bytes, head: bytes = b"") -> None:
        """``out`` to the client in its framing, after ``head`` when given (one write)."""
        if self.client.is_closing():
            self.gone = True
            return
        if not out or self.framing.empty:
            if head:
                self.client.write(head)
            return
        framed = b"%x\r\n%b\r\n" % (len(out), out) if self.framing.chunked else out
        self.client.write(head + framed if head else framed)
        self.ex.bytes_out += len(out)

    def end(self) -> None:
        """The body is over: what the relay held back, then the last chunk."""
        if self.relay is not None:
            self.ex.usage_event = self.relay.usage_event
            self.write(self.relay.flush())
        if self.framing.chunked and not self.gone:
            self.client.write(b"0\r\n\r\n")


def _stream_ended(ex: Exchange) -> bool:
    """Whether the upstream's stream had ended (``data: [DONE]``) when the client left:
    an SDK closes its connection as soon as it reads ``[DONE]``, before the proxy reads
    the end of the upstream's chunked body; that client got the whole answer."""
    tap = ex.tap
    return tap is not None and tap.stream and bytes(tap.kept).rstrip().endswith(b"[DONE]")


def _continue(request: web.BaseRequest) -> None:
    """Tell a client waiting with ``Expect: 100-continue`` to send its body (aiohttp's
    low-level server leaves that to the handler; curl waits a second without it)."""
    if request.transport is not None and not request.transport.is_closing():
        request.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")


def _abort(request: web.BaseRequest) -> None:
    if request.transport is not None:
        request.transport.abort()
