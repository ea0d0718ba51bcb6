"""Sending one request and measuring it: the dispatcher's only contact with the network.

A small interface (``Transport.send``) so the dispatcher's timing logic can be
tested with a fake, while integration tests and real replays use ``HttpTransport``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from tailreplay.dialects import Dialect, dialect_for
from tailreplay.http.client import (
    UpstreamError,
    UpstreamPool,
    UpstreamResponse,
    framing,
    request_line,
    split_url,
)
from tailreplay.http.retry_after import retry_after_s
from tailreplay.http.sse import StreamTimeline, flat_bins
from tailreplay.openai_api import ResponseTap, read_answer
from tailreplay.replayer.request import RequestSpec
from tailreplay.traces.archive.validate import target_ok, token_ok
from tailreplay.traces.text.redact_targets import redact_url
from tailreplay.version import __version__

__all__ = ["HttpTransport", "Outcome", "Transport"]


@dataclass(slots=True)
class Outcome:
    """What came back for one request, measured the way the proxy measures a capture."""

    status: int = 0
    error: str | None = None
    ttfb_ns: int | None = None
    """First body byte; for SSE the first token event (tailreplay.http.sse)."""
    ttft_content_ns: int | None = None
    """SSE: the first answer token, when reasoning came before it."""
    duration_ns: int | None = None
    gaps_us: list[int] | None = None
    gaps_more: list[int] | None = None
    """Gaps past the first ``EXACT_GAPS``, binned (``tailreplay.http.sse.flat_bins``)."""
    bytes_out: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    tokens_source: str | None = None
    """``usage`` (the target said), ``estimate`` (counted here), or None."""
    finish_reason: str | None = None
    error_text: str = ""
    content_type: str = ""
    retry_after_s: float | None = None
    """A 429's or 503's ``Retry-After``, in seconds."""


async def _refused(method: str, target: str) -> Outcome:
    shown = ascii(f"{method} {target}"[:80])
    return Outcome(error="bad_request", error_text=f"not sent: an unsafe request line {shown}")


class Transport(Protocol):
    async def send(
        self, spec: RequestSpec, headers: Mapping[str, str], traceparent: str | None = None
    ) -> Outcome:
        """Send ``spec`` with the run's own ``headers`` (``--header``, the same for every
        request) and this request's trace context; the transport adds its framing, a
        JSON content type for a body and a User-Agent, unless ``headers`` give them."""
        ...

    def url(self, path: str) -> str:
        """Where a recorded path is sent (for messages)."""
        ...

    async def warm(self, connections: int) -> None:
        """Open up to ``connections`` connections before the first request is due."""
        ...

    async def close(self) -> None: ...


WARM_S = 5.0
"""The longest the warm-up may take."""
_HEADS = 4096
"""Request heads kept made (one a route); past it they are made again."""

_ERRORS = {
    "upstream_timeout": "timeout",
    "upstream_connect": "connect",
    "upstream_reset": "reset",
    "upstream_error": "reset",
}
"""The shared client's failure kinds, named as replay results name them."""


class HttpTransport:
    """The shared HTTP/1.1 client (``tailreplay.http.client``), at most
    ``connections`` connections to the target.

    A request's times count from when its head was written to the socket, as the
    proxy's count from when a request's head arrived: so a capture and its replay
    measure the same span of the exchange. Body bytes are taken, timed and parsed
    inside the callback that read them (no task switch an event); a stream the
    target compresses (an explicit ``--header accept-encoding``) is inflated first.
    """

    def __init__(self, base_url: str, *, connections: int, timeout_s: float) -> None:
        self.base = base_url.rstrip("/")
        # A base given with /v1 (as OpenAI SDKs take it) is not doubled: /v1/x goes to
        # <host>/v1/x, not <host>/v1/v1/x.
        self._v1_base = self.base[: -len("/v1")] if self.base.endswith("/v1") else None
        parts = urlsplit(self.base)
        self._origin, _ = split_url(self.base)
        # The request target is the base's path and the recorded one: worked out once.
        self._root = self.base[: len(self.base) - len(parts.path.rstrip("/"))]
        self._prefix = parts.path.rstrip("/")
        self._v1_prefix = self._prefix[: -len("/v1")] if self._v1_base is not None else None
        # --connections 0: no limit (idle ones kept up to the default's 1,024)
        self._pool = UpstreamPool(
            timeout_s=timeout_s,
            connect_timeout_s=min(timeout_s, 10),
            max_connections=connections or None,
            max_idle=connections or 1024,
        )
        self._headers: dict[str, str] = {}
        self._fixed: dict[tuple[str, str, bool], bytes] = {}
        """Each route's head but for its trace context and length, for ``_headers``."""
        self._encodings: frozenset[str] = frozenset()
        """What the run's Accept-Encoding asked for: the only encodings inflated."""
        self._safe: set[tuple[str, str]] = set()
        """Methods and paths found safe to write in a request line."""

    def send(
        self, spec: RequestSpec, headers: Mapping[str, str], traceparent: str | None = None
    ) -> Coroutine[Any, Any, Outcome]:
        # Checked on read already (traces/archive/validate.py); checked again here, where
        # the request line is written: a method or target that could split it or point
        # it elsewhere is refused, never sent.
        if (spec.method, spec.path) not in self._safe:
            target = self._target(spec.path)
            if not token_ok(spec.method) or not target_ok(target):
                return _refused(spec.method, target)
            if len(self._safe) >= _HEADS:
                self._safe.clear()
            self._safe.add((spec.method, spec.path))
        # The exchange's own coroutine, not one awaiting it: a level less to resume.
        head = self._head(spec, headers, traceparent)
        if spec.abort_after_s is None:
            return self._send(spec, head)
        return self._send_until(spec, head, spec.abort_after_s)

    async def _send_until(self, spec: RequestSpec, head: bytes, limit_s: float) -> Outcome:
        """A recorded abort whose tokens are unknown: leave after the recorded time,
        with what had come by then (the status and first byte; none if nothing had:
        the target then answered nothing)."""
        began = time.monotonic_ns()
        started: list[_Reader] = []
        try:
            async with asyncio.timeout(limit_s):
                return await self._send(spec, head, started)
        except TimeoutError:
            out = started[0].out if started else Outcome()
            out.error, out.duration_ns = "client_abort", time.monotonic_ns() - began
            return out

    def _head(
        self, spec: RequestSpec, headers: Mapping[str, str], traceparent: str | None
    ) -> bytes:
        """The request's head as bytes: all but its trace context and length made once
        per route and header set (a replay sends thousands a second)."""
        if headers != self._headers:
            self._headers, self._fixed = dict(headers), {}
            self._encodings = _accepted(headers)
        key = (spec.method, spec.path, spec.body is not None)
        fixed = self._fixed.get(key)
        if fixed is None:
            if len(self._fixed) >= _HEADS:
                self._fixed.clear()
            line = request_line(spec.method, self._target(spec.path), self._origin)
            given = _fixed_headers(headers, spec.body is not None, dialect_for(spec.path))
            lines = [f"{k}: {v}\r\n" for k, v in given]
            # The run's header bytes pass through as the command line decoded them.
            fixed = self._fixed[key] = "".join([line, *lines]).encode("utf-8", "surrogateescape")
        trace = f"traceparent: {traceparent}\r\n" if traceparent else ""
        return b"%b%b\r\n" % (fixed, (trace + framing(spec.method, spec.body)).encode())

    async def _send(
        self, spec: RequestSpec, head: bytes, started: list[_Reader] | None = None
    ) -> Outcome:
        """The exchange; ``started`` gets its reader once the answer's head is in."""
        began = time.monotonic_ns()  # until the head is written: the call's start
        try:
            resp = await self._pool.send_head(self._origin, spec.method, head, spec.body)
        except UpstreamError as exc:
            return Outcome(
                error=_ERRORS.get(exc.kind, exc.kind),
                error_text=exc.message,
                duration_ns=time.monotonic_ns() - began,
            )
        reader = _Reader(resp, spec, self._encodings)
        if started is not None:
            started.append(reader)
        try:
            resp.start(reader.feed)
            await resp.wait()  # False, not waited further: the reader stopped at an abort
        except UpstreamError as exc:
            reader.out.error = _ERRORS.get(exc.kind, exc.kind)
            if exc.kind == "bad_response":  # why, for the summary and the record
                reader.out.error_text = exc.message
        finally:
            resp.close()  # an unfinished response drops its connection: the target sees it
        return reader.finish(spec)

    def url(self, path: str) -> str:
        """Where a recorded path is sent, as a message shows it: credentials in the
        base URL (``http://user:password@host``) masked."""
        return redact_url(self._root + self._path(path))

    def _target(self, path: str) -> str:
        """The request target (path and query) on the origin."""
        return self._path(path) or "/"

    def _path(self, path: str) -> str:
        if self._v1_prefix is not None and (path.startswith("/v1/") or path == "/v1"):
            return self._v1_prefix + path
        return self._prefix + path

    async def warm(self, connections: int) -> None:
        """Open up to ``connections`` keep-alive connections (TCP and TLS, no request) in
        all, so the first burst of due requests does not each pay for a connect: without
        it, the first 16 of a burst left up to 12 ms late. Only where the preflight's
        connection was kept alive: a target that closes after each answer (HTTP/1.0,
        ``Connection: close``, one connection at a time) would sit reading an idle one
        while requests wait on the others. Bounded: a target that hangs on a connect is
        found by the replay itself."""
        if not self._pool.idle_count(self._origin):
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._pool.open_idle(self._origin, connections), WARM_S)

    async def close(self) -> None:
        await self._pool.close()


class _Reader:
    """One response's body as it arrives: timed, tapped, and cut at a recorded abort."""

    __slots__ = ("inflate", "out", "read", "resp", "stop_at", "t0", "tap", "timeline")

    def __init__(self, resp: UpstreamResponse, spec: RequestSpec, accepted: frozenset[str]) -> None:
        self.resp = resp
        self.t0 = resp.sent_ns
        out = self.out = Outcome(status=resp.status)
        names = {k.lower(): v for k, v in resp.headers}
        out.content_type = names.get("content-type", "").split(";", 1)[0].strip().lower()
        if resp.status in (429, 503):
            out.retry_after_s = retry_after_s(names.get("retry-after"))
        sse = out.content_type == "text/event-stream"
        # Token events are its dialect's (a route none serves: its first byte is all).
        dialect = dialect_for(spec.path) if sse else None
        self.timeline = StreamTimeline(dialect) if dialect is not None else None
        self.tap = ResponseTap(stream=sse)
        self.stop_at = spec.abort_after_tokens or float("inf")
        self.read = 0
        """Body bytes as they came (compressed, where they were)."""
        encoding = names.get("content-encoding", "identity").strip().lower()
        self.inflate = _inflater(encoding) if encoding in accepted else None
        if encoding not in accepted and encoding != "identity":
            # Compressed although the run never asked for it: not inflated (a bomb would
            # stall every request's timing), and not what the API promises.
            out.error, out.error_text = "bad_response", f"Content-Encoding {encoding} not asked for"

    def feed(self, chunk: bytes) -> bool:
        if self.out.error == "bad_response":  # an encoding not asked for: read no more
            return False
        now = time.monotonic_ns()
        self.read += len(chunk)
        if self.inflate is not None:
            # Bounded work per read: never past MAX_BODY_BYTES in all, nor INFLATE_RATIO
            # times what came compressed (JSON and SSE compress ~5-20x; a bomb ~1000x).
            room = min(MAX_BODY_BYTES - self.out.bytes_out, INFLATE_RATIO * self.read + 65536)
            chunk = self.inflate.decompress(chunk, max(room, 1))
            if self.inflate.unconsumed_tail:
                return self._cut("inflated past its bound (a compression bomb?)")
        elif self.timeline is None and self.out.bytes_out + len(chunk) > MAX_BODY_BYTES:
            return self._cut(f"a body over {MAX_BODY_BYTES >> 20} MiB")
        out, timeline = self.out, self.timeline
        if timeline is not None:
            timeline.feed(chunk, now)
        elif out.ttfb_ns is None:
            out.ttfb_ns = now - self.t0
        out.bytes_out += len(chunk)
        self.tap.feed(chunk)
        if timeline is not None and timeline.tokens >= self.stop_at:
            out.error = "client_abort"  # the recorded client left here: so do we
            return False
        return True

    def _cut(self, why: str) -> bool:
        """Stop reading: the answer is not one the API gives."""
        self.out.error, self.out.error_text = "bad_response", why
        return False

    def finish(self, spec: RequestSpec) -> Outcome:
        out, timeline = self.out, self.timeline
        end = time.monotonic_ns()
        out.duration_ns = end - self.t0
        if out.error is not None and out.error != "client_abort":
            return out
        if timeline is not None:
            timeline.finish(end)
            _timeline(out, timeline, self.t0)
        aborted = out.error
        _read_body(out, spec, self.tap, timeline)
        if aborted:
            out.error = aborted
        return out


MAX_BODY_BYTES = 64 << 20
"""A non-streamed answer (or an inflated one) larger than this is cut: ``bad_response``."""
INFLATE_RATIO = 100
"""What a compressed body may inflate to, times its compressed size (plus 64 KiB)."""

_OWN = frozenset({"host", "content-length", "transfer-encoding", "connection", "traceparent"})
"""Headers the client writes itself (the target's address, the body's framing and the
request's own trace context)."""
_AGENT = ("User-Agent", f"tailreplay/{__version__}")
_JSON = ("Content-Type", "application/json")


def _fixed_headers(
    headers: Mapping[str, str], body: bool, dialect: Dialect | None
) -> list[tuple[str, str]]:
    """The run's headers as sent, but for those the client writes itself; a User-Agent,
    for a body a JSON content type (servers built on FastAPI or pydantic reject a body
    without it), and the headers the dialect's API requires (``anthropic-version``),
    unless given."""
    out = [(k, v) for k, v in headers.items() if k.lower() not in _OWN]
    given = {k.lower() for k, _ in out}
    for name, value in dialect.headers if dialect is not None else ():
        if name not in given:
            out.append((name, value))
    if body and "content-type" not in given:
        out.append(_JSON)
    if "user-agent" not in given:
        out.append(_AGENT)
    return out


def _accepted(headers: Mapping[str, str]) -> frozenset[str]:
    """The encodings an ``Accept-Encoding`` among ``headers`` asks for that can be
    inflated here (gzip, deflate); identity always."""
    asked = {"identity"}
    for name, value in headers.items():
        if name.lower() == "accept-encoding":
            asked |= {part.split(";")[0].strip().lower() for part in value.split(",")}
    return frozenset(asked & {"identity", "gzip", "deflate"})


def _inflater(encoding: str) -> Any:
    """A decompressor for a ``Content-Encoding`` (gzip, deflate), None for identity."""
    if encoding == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    return None


def _timeline(out: Outcome, timeline: StreamTimeline, t0_ns: int) -> None:
    """A stream's TTFT, time to the answer and inter-token gaps."""
    first, answer = timeline.first_ns, timeline.first_answer_ns
    out.ttfb_ns = first - t0_ns if first is not None else None
    if answer is not None and answer != first:
        out.ttft_content_ns = answer - t0_ns
    out.gaps_us = timeline.gaps_us
    out.gaps_more = flat_bins(timeline.more)


def _why_bad(out: Outcome, timeline: StreamTimeline | None) -> str:
    """What made a successful status's answer not the API's, for the summary."""
    if timeline is None:
        return f"a {out.status} whose body is not JSON ({out.content_type or 'no content type'})"
    if timeline.malformed:
        return "a stream event that is not JSON"
    return "the stream ended without its closing event (cut short)"


def _read_body(
    out: Outcome, spec: RequestSpec, tap: ResponseTap, timeline: StreamTimeline | None
) -> None:
    """Error text, or usage and finish reason; tokens counted here when the target gave none."""
    if out.status >= 400:
        out.error_text = bytes(tap.kept[:2000]).decode("utf-8", "replace")
        return
    if 300 <= out.status < 400:  # not followed: the request's result, a failure
        out.error = f"http_{out.status}"
        return
    out.error, usage = read_answer(spec.path, out.status, tap, timeline)
    if out.error == "bad_response" and not out.error_text:
        out.error_text = _why_bad(out, timeline)
    out.finish_reason = usage.finish_reason
    if usage.prompt_tokens is not None and usage.completion_tokens is not None:
        out.prompt_tokens, out.completion_tokens = usage.prompt_tokens, usage.completion_tokens
        out.cached_tokens, out.reasoning_tokens = usage.cached_tokens, usage.reasoning_tokens
        if out.reasoning_tokens is None and timeline is not None:
            # Anthropic reports no thinking tokens apart: its thinking events count them.
            out.reasoning_tokens = timeline.reasoning or None
        out.tokens_source = "usage"
    elif out.error is None and timeline is not None and timeline.tokens:
        # No usage (llama.cpp ignores include_usage): one token an event, as the proxy counts.
        out.completion_tokens = timeline.tokens
        out.reasoning_tokens = timeline.reasoning or None
        out.tokens_source = "estimate"
