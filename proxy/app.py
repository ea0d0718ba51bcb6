"""The forwarding handler: one request in, the same request upstream, the response back.

Streams both ways: the response goes to the client chunk by chunk as it arrives
(``iter_any``, a 1 MiB read buffer, no decompression), so time to first token is
the upstream's plus a loop turn. Only configured upstreams are ever contacted:
the target URL is built by appending the request path to the configured base and
checked again before sending, so absolute-form targets, CONNECT, ``//host`` paths
and Host headers cannot steer a request elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import aiohttp
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from yarl import URL

from tailreplay.proxy.config import ProxyConfig
from tailreplay.proxy.exchange import Exchange, Sink
from tailreplay.proxy.headers import request_headers_upstream, response_headers_downstream
from tailreplay.proxy.openai import (
    OPENAI_PATHS,
    ResponseTap,
    SseRelay,
    route_label,
    with_usage_requested,
)
from tailreplay.tracecontext import new_span_id, new_trace_id, parse_traceparent

__all__ = ["build_server", "client_session"]

log = logging.getLogger("tailreplay.proxy")

_READ_BUFSIZE = 1 << 20


def _json_error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": None}}, status=status
    )


def build_server(
    config: ProxyConfig, sinks: Sequence[Sink], session: aiohttp.ClientSession
) -> web.Server:
    """The proxy's HTTP server: aiohttp's low-level server, every request to one handler.

    A reverse proxy has one route, so the Application layer — router, middleware
    chain, per-request match info — would be pure cost: about 5% of a request's CPU
    (bench/proxy.py).
    """
    forwarder = _Forwarder(config, list(sinks), session)

    def make_request(
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        return web.BaseRequest(
            message, payload, protocol, writer, task, task.get_loop(),
            client_max_size=config.max_body,
        )  # fmt: skip

    return web.Server(
        forwarder.handle, request_factory=make_request, handler_cancellation=True, access_log=None
    )


def client_session(config: ProxyConfig) -> aiohttp.ClientSession:
    """The one upstream session: pooled keep-alive connections, bytes passed as they are."""
    connector = aiohttp.TCPConnector(
        limit=0, limit_per_host=0, keepalive_timeout=60, ttl_dns_cache=300
    )
    return aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        read_bufsize=_READ_BUFSIZE,
        timeout=aiohttp.ClientTimeout(
            total=config.timeout_s, sock_connect=min(config.timeout_s, 10)
        ),
        # The upstream sees the client's headers, not aiohttp's defaults: an
        # Accept-Encoding the client never sent would get it a compressed body.
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
    )


class _Forwarder:
    def __init__(
        self, config: ProxyConfig, sinks: list[Sink], session: aiohttp.ClientSession
    ) -> None:
        self.config = config
        self.sinks = sinks
        self.session = session
        self.allowed = config.allowed_origins()
        self._targets: dict[str, URL] = {}

    def _target(self, raw_path: str) -> URL | None:
        # A few paths carry nearly all traffic: building and checking their URL once
        # saves a URL parse per request. Bounded, since paths come from clients.
        if (url := self._targets.get(raw_path)) is not None:
            return url
        base = self.config.upstream_for(raw_path)
        # String concatenation, never URL joining: "//evil.example/x" must stay a path.
        url = URL(str(base).rstrip("/") + raw_path, encoded=True)
        if (url.scheme, url.host, url.port) not in self.allowed:
            return None
        if len(self._targets) >= 4096:
            self._targets.clear()
        self._targets[raw_path] = url
        return url

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
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
        ex = Exchange(
            trace_id=trace_id,
            span_id=new_span_id(),
            parent_span_id=incoming.span_id if incoming else None,
            start_ns=time.time_ns(),
            t0_ns=t0,
            method=request.method,
            path=request.raw_path,
            route=route_label(request.raw_path),
            headers=list(request.headers.items()),
        )
        for sink in self.sinks:
            sink.on_request(ex)
        try:
            return await self._forward(request, ex, flags)
        except asyncio.CancelledError:
            ex.error = ex.error or "client_abort"
            raise
        finally:
            if ex.duration_ns is None:
                ex.duration_ns = time.monotonic_ns() - t0
            for sink in self.sinks:
                sink.on_complete(ex)

    async def _forward(
        self, request: web.BaseRequest, ex: Exchange, flags: int
    ) -> web.StreamResponse:
        config = self.config
        target = self._target(request.raw_path)
        if target is None:
            ex.status = 400
            return _json_error(
                400, "no configured upstream serves this path", "invalid_request_error"
            )
        if request.content_length is not None and request.content_length > config.max_body:
            ex.status = 413
            return _json_error(
                413, f"request body over {config.max_body} bytes", "invalid_request_error"
            )

        headers = request_headers_upstream(
            request.headers, client_ip=request.remote, scheme=request.scheme, host=request.host
        )
        # Our span is the upstream's parent: its spans nest under the proxy's.
        headers.append(("traceparent", f"00-{ex.trace_id.hex()}-{ex.span_id.hex()}-{flags:02x}"))
        if (tracestate := request.headers.get("tracestate")) is not None:
            headers.append(("tracestate", tracestate))

        data: bytes | aiohttp.StreamReader | None
        if request.can_read_body and ex.route in OPENAI_PATHS:
            try:
                raw = await request.read()
            except web.HTTPRequestEntityTooLarge:
                ex.status = 413
                return _json_error(
                    413, f"request body over {config.max_body} bytes", "invalid_request_error"
                )
            ex.bytes_in = len(raw)
            ex.req_body = raw
            changed = with_usage_requested(request.raw_path, raw) if config.inject_usage else None
            ex.injected_usage = changed is not None
            data = changed if changed is not None else raw
        elif request.can_read_body:
            data = request.content  # streamed; client_max_size does not apply to it
            ex.bytes_in = request.content_length or 0
        else:
            data = None

        try:
            upstream = await self.session.request(
                request.method,
                target,
                headers=headers,
                data=data,
                allow_redirects=False,
                compress=None,
                auto_decompress=False,
            )
        except TimeoutError:
            ex.error, ex.status = "upstream_timeout", 504
            return _json_error(504, "the upstream did not answer in time", "upstream_timeout")
        except aiohttp.ClientConnectorError as exc:
            ex.error, ex.status = "upstream_connect", 502
            return _json_error(
                502, f"cannot connect to the upstream: {exc.os_error}", "upstream_connect"
            )
        except aiohttp.ClientError as exc:
            ex.error, ex.status = "upstream_error", 502
            return _json_error(502, f"upstream error: {type(exc).__name__}", "upstream_error")

        async with upstream:
            return await self._relay(request, upstream, ex)

    async def _relay(
        self, request: web.BaseRequest, upstream: aiohttp.ClientResponse, ex: Exchange
    ) -> web.StreamResponse:
        ex.status = upstream.status
        ex.content_encoding = upstream.headers.get("Content-Encoding")
        is_sse = upstream.headers.get("Content-Type", "").startswith("text/event-stream")
        relay = SseRelay() if is_sse and ex.injected_usage else None
        ex.tap = ResponseTap(stream=is_sse)
        if is_sse:
            ex.gaps_us = []
        response = web.StreamResponse(
            status=upstream.status,
            reason=upstream.reason,
            headers=response_headers_downstream(upstream.headers, keep_length=relay is None),
        )
        try:
            await response.prepare(request)
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            ex.error = "client_abort"
            return response
        sinks, tap, t0 = self.sinks, ex.tap, ex.t0_ns
        try:
            async for chunk in upstream.content.iter_any():
                now = time.monotonic_ns()
                if ex.gaps_us is not None:
                    # One gap per SSE event (≈ per token): events that arrived in the
                    # same read came together, so all but the first get a gap of 0.
                    events = chunk.count(b"\n\n") or 1
                    first = (now - ex.last_chunk_ns) // 1000 if ex.ttfb_ns is not None else None
                    if first is not None:
                        ex.gaps_us.append(first)
                    ex.gaps_us.extend([0] * (events - 1))
                if ex.ttfb_ns is None:
                    ex.ttfb_ns = now - t0
                ex.last_chunk_ns = now
                tap.feed(chunk)
                out = relay.feed(chunk) if relay is not None else chunk
                if out:
                    await response.write(out)
                    ex.bytes_out += len(out)
                for sink in sinks:
                    sink.on_chunk(ex, len(chunk))
        except TimeoutError:
            ex.error = "upstream_timeout"
            _abort(request)
            return response
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            ex.error = "upstream_reset"
            _abort(request)  # the client must see a broken response, not a short one
            return response
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            ex.error = "client_abort"
            return response
        if relay is not None:
            ex.usage_event = relay.usage_event
            rest = relay.flush()
            if rest:
                await response.write(rest)
                ex.bytes_out += len(rest)
        await response.write_eof()
        ex.duration_ns = time.monotonic_ns() - t0
        return response


def _abort(request: web.BaseRequest) -> None:
    if request.transport is not None:
        request.transport.abort()
